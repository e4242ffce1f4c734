//! Walks `tests/conformance/` and checks every spec against the diagnostics
//! annotated inside it; files under `notyet/` must still fail (known gaps).

use std::path::Path;

use stratum_conformance::{corpus, report, run_file};

#[test]
fn conformance_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance");
    let files = corpus(&root);
    assert!(
        !files.is_empty(),
        "no conformance cases under {}",
        root.display()
    );
    let outcomes: Vec<_> = files
        .iter()
        .map(|f| {
            (
                f.components().any(|c| c.as_os_str() == "notyet"),
                run_file(f),
            )
        })
        .collect();
    let failed: Vec<_> = outcomes
        .iter()
        .filter(|(notyet, o)| !notyet && !o.passed())
        .map(|(_, o)| o)
        .collect();
    let fixed: Vec<_> = outcomes
        .iter()
        .filter(|(notyet, o)| *notyet && o.passed())
        .map(|(_, o)| o.path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} conformance cases failed:{}",
        failed.len(),
        files.len(),
        report(&failed)
    );
    assert!(
        fixed.is_empty(),
        "these notyet/ cases pass now; move them out of notyet/: {fixed:?}"
    );
}

#[test]
fn examples_check_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let files = corpus(&root);
    assert!(files.len() >= 7, "expected the seed examples in examples/");
    let failed: Vec<_> = files
        .iter()
        .map(|f| run_file(f))
        .filter(|o| !o.passed())
        .collect();
    let refs: Vec<_> = failed.iter().collect();
    assert!(
        failed.is_empty(),
        "examples with diagnostics:{}",
        report(&refs)
    );
}
