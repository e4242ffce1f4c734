//! Did-you-mean: the one rule for which known name a misspelt one was meant
//! to be, shared by the compiler's diagnostics (it re-exports [`suggest`])
//! and the VM's configuration reader.
//!
//! Owns: the edit distance (Levenshtein over chars, a transposition counted
//! as one edit) and the closeness limit (a third of the longer name, at
//! least one edit).
//! Must never: depend on what the names mean, or on the order of the
//! candidates (ties go to the smaller name).

/// The candidate closest to `name` when it is close enough.
pub fn suggest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        if candidate == name {
            continue;
        }
        let distance = edit_distance(&name.to_lowercase(), &candidate.to_lowercase());
        let limit = (name.chars().count().max(candidate.chars().count()) / 3).max(1);
        // ties go to the smaller name, so the suggestion never depends on map order
        if distance <= limit
            && best.is_none_or(|(d, c)| distance < d || (distance == d && candidate < c))
        {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// Levenshtein distance over chars, with transpositions counted as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(prev2[j - 2] + 1);
            }
            cur[j] = v;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpositions_are_one_edit() {
        assert_eq!(edit_distance("ensrue", "ensure"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(suggest("cladue", ["claude", "codex"]), Some("claude"));
        assert_eq!(suggest("gpt", ["claude", "codex"]), None);
    }
}
