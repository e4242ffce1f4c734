//! Races against the workspace jail (issue 13, items 5 and 6): a thread
//! swaps parts of the workspace with `renameat2(RENAME_EXCHANGE)` while file
//! predicates run. No read may ever see a file outside the root (by content
//! or by hash), and no read may block on a FIFO swapped in.
#![cfg(target_os = "linux")]

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use rustix::fs::{CWD, RenameFlags, renameat_with};
use stratum_vm::host::Workspace;

/// Iterations of the reading side of each race.
const ROUNDS: usize = 2_000;

fn hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Exchanges `a` and `b` until `stop` is set; returns how many swaps it made.
fn swapper(a: &Path, b: &Path, stop: Arc<AtomicBool>) -> thread::JoinHandle<usize> {
    let (a, b) = (a.to_path_buf(), b.to_path_buf());
    thread::spawn(move || {
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            renameat_with(CWD, &a, CWD, &b, RenameFlags::EXCHANGE)
                .expect("RENAME_EXCHANGE is supported on the test's filesystem");
            swaps += 1;
        }
        swaps
    })
}

#[test]
fn a_directory_swapped_with_a_symlink_out_never_leaks_the_outside_file() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(root.join("d")).unwrap();
    let secret = b"OUTSIDE SECRET 0123456789";
    std::fs::write(outside.join("f"), secret).unwrap();
    std::fs::write(root.join("d/f"), b"inside, nothing to see").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("swap")).unwrap();
    let ws = Workspace::new(&root).unwrap();
    // an absolute symlink to the root itself: the kernel's RESOLVE_BENEATH
    // refuses absolute links, so `abs/d/f` is resolved by the walk
    std::os::unix::fs::symlink(ws.root(), root.join("abs")).unwrap();
    let secret_hash = hash(secret);

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = swapper(&root.join("d"), &root.join("swap"), stop.clone());
    let (mut leaks, mut inside, mut refused) = (0, 0, 0);
    for round in 0..ROUNDS {
        let path = if round % 2 == 0 { "d/f" } else { "abs/d/f" };
        match ws.file_contains(path, "SECRET") {
            Ok((found, ev)) => {
                if found || ev.blake3.as_deref() == Some(secret_hash.as_str()) {
                    leaks += 1;
                } else if ev.exists {
                    inside += 1;
                }
            }
            Err(_) => refused += 1,
        }
        match ws.file_exists(path) {
            Ok(ev) if ev.blake3.as_deref() == Some(secret_hash.as_str()) => leaks += 1,
            Ok(_) => {}
            Err(_) => refused += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swaps.join().unwrap();
    eprintln!("{inside} inside, {refused} refused, {leaks} leaks, {swaps} swaps");
    assert_eq!(
        leaks, 0,
        "{leaks} reads saw the outside file ({inside} inside, {refused} refused, {swaps} swaps)"
    );
    assert!(swaps > 0, "the swapper never ran");
}

#[test]
fn a_fifo_swapped_in_for_a_file_never_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("f"), b"a regular file").unwrap();
    rustix::fs::mknodat(
        CWD,
        root.join("pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let ws = Workspace::new(&root).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = swapper(&root.join("f"), &root.join("pipe"), stop.clone());
    let done = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    let counter = done.clone();
    thread::spawn(move || {
        for _ in 0..ROUNDS {
            let _ = ws.file_contains("f", "regular");
            let _ = ws.file_exists("f");
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let _ = tx.send(());
    });
    let finished = rx.recv_timeout(Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    let swaps = swaps.join().unwrap();
    if finished.is_err() {
        // unblock the reader stuck in open(): a writer lets it go on
        for name in ["pipe", "f"] {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                .open(root.join(name));
        }
        panic!(
            "a file predicate blocked on the FIFO after {} rounds ({swaps} swaps)",
            done.load(Ordering::Relaxed)
        );
    }
}
