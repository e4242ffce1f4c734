//! Run state as store rows: a step's row (its state without its fanout
//! items, naming how many item rows belong to it), one row per item
//! ([`RowKey::item`]) and one per frame input ([`RowKey::frame_input`],
//! written once: the header every transition rewrites does not carry it),
//! so a report on one item of a 10,000-item fanout over a 10,000-element
//! input writes that item, a small step row and a small header.
//!
//! Owns: the encoding of changed rows for a commit, and the one decoder of
//! stored rows back into steps (used for loaded runs and for checkpoints,
//! which keep the stored rows as they were). Rows written before items had
//! rows of their own embed the items in the step row (and headers the
//! inputs); they still decode, and their next commit writes them as rows.
//! Must never: decide anything about execution, or allocate from a length
//! read from the store before checking the rows that length needs exist.

use std::collections::{BTreeSet, HashMap};

use crate::interp::{FrameInput, FrameIx, Header, ItemState, RowKey, Run, StepAt, StepState};

/// The changed rows of a run, encoded for the store, sorted by key: each
/// changed step's row, the rows of its items that changed, and the input
/// rows of frames not stored yet.
pub(super) fn dirty_rows(run: &mut Run) -> Vec<(u64, Vec<u8>)> {
    let mut rows = encode_dirty(&run.dirty, &mut run.steps);
    for (f, frame) in run.header.frames.iter().enumerate() {
        if frame.input.unstored() {
            let key = RowKey::frame_input(FrameIx(f as u32));
            rows.push((key.raw(), encode(&*frame.input)));
        }
    }
    rows.sort_unstable_by_key(|(k, _)| *k);
    rows
}

/// The header as stored: without the frames' inputs (their rows hold them).
pub(super) fn encode_header(h: &mut Header) -> Vec<u8> {
    h.inputs_apart = true;
    encode(&*h)
}

fn encode_dirty(dirty: &BTreeSet<RowKey>, steps: &mut [Vec<StepState>]) -> Vec<(u64, Vec<u8>)> {
    let mut rows = Vec::new();
    for &key in dirty {
        let at = key.slot().at;
        let st = &mut steps[at.frame.ix()][at.ix()];
        for k in st.items.changed() {
            let item = &st.items[k as usize];
            rows.push((RowKey::item(at, k).raw(), encode(item)));
        }
        rows.push((key.raw(), encode_step(st)));
    }
    rows.sort_unstable_by_key(|(k, _)| *k);
    rows
}

/// After a commit of [`dirty_rows`]: nothing is changed any more.
pub(super) fn committed(run: &mut Run) {
    for frame in &mut run.header.frames {
        frame.input.set_stored(true);
    }
    let Run { dirty, steps, .. } = run;
    for key in std::mem::take(dirty) {
        let at = key.slot().at;
        steps[at.frame.ix()][at.ix()].items.committed();
    }
}

/// A step's row: its state with the items left out (they have rows of
/// their own) and their number in `item_rows`.
fn encode_step(st: &mut StepState) -> Vec<u8> {
    if st.items.is_empty() {
        return encode(&*st);
    }
    let list = st.items.take_list();
    // a fanout's list is bounded by the value limits, far below u32::MAX
    st.item_rows = Some(u32::try_from(list.len()).unwrap_or(u32::MAX));
    let bytes = encode(&*st);
    st.item_rows = None;
    st.items.put_back(list);
    bytes
}

fn encode<T: serde::Serialize>(v: &T) -> Vec<u8> {
    // Invariant: run state is plain data (strings, numbers, JSON values); it always serializes.
    serde_json::to_vec(v).expect("invariant: step and item states always serialize")
}

/// A stored header and rows back into the run state: the header with its
/// frames' inputs and the steps of each frame. `what` names the run or
/// checkpoint in errors.
pub(super) fn decode_run<'r>(
    what: &str,
    header: &[u8],
    rows: impl IntoIterator<Item = (u64, &'r [u8])>,
) -> Result<(Header, Vec<Vec<StepState>>), String> {
    let mut header: Header = serde_json::from_slice(header)
        .map_err(|e| format!("{what}: the header does not decode: {e}"))?;
    let lens: Vec<u32> = header.frames.iter().map(|f| f.len).collect();
    let mut inputs = Vec::new();
    let steps = decode_steps(what, &lens, rows, &mut inputs)?;
    if header.inputs_apart {
        let mut seen = vec![false; header.frames.len()];
        for (f, blob) in inputs {
            // rows of frames the header does not list are not read
            let Some(frame) = header.frames.get_mut(f.ix()) else {
                continue;
            };
            let value = serde_json::from_slice(blob)
                .map_err(|e| format!("{what}: the input of frame {} does not decode: {e}", f.0))?;
            frame.input = FrameInput::stored(value);
            seen[f.ix()] = true;
        }
        if let Some(f) = seen.iter().position(|s| !s) {
            return Err(format!("{what}: the input row of frame {f} is missing"));
        }
    }
    Ok((header, steps))
}

/// Stored rows back into the steps of each frame (`lens`: the steps per
/// frame the header lists), the input rows set aside into `inputs`:
/// exactly one stored row for every step of every frame. Every step's row
/// is written when its frame is created, so a missing row, an extra one or
/// a second one for a step is damage, never a step still pending.
fn decode_steps<'r>(
    what: &str,
    lens: &[u32],
    rows: impl IntoIterator<Item = (u64, &'r [u8])>,
    inputs: &mut Vec<(FrameIx, &'r [u8])>,
) -> Result<Vec<Vec<StepState>>, String> {
    let corrupt = |why: String| format!("{what}: {why}");
    if lens.is_empty() {
        return Err(corrupt("the header lists no frame".into()));
    }
    let mut step_rows = Vec::new();
    let mut item_rows: HashMap<StepAt, Vec<(u32, &'r [u8])>> = HashMap::new();
    for (key, blob) in rows {
        if let Some(f) = RowKey::from_raw(key).input_of() {
            inputs.push((f, blob));
            continue;
        }
        let slot = RowKey::from_raw(key).slot();
        match slot.item {
            None => step_rows.push((key, slot.at, blob)),
            Some(k) => item_rows.entry(slot.at).or_default().push((k, blob)),
        }
    }
    let expected: u64 = lens.iter().map(|&n| u64::from(n)).sum();
    if expected != step_rows.len() as u64 {
        // checked before anything is allocated from the header's lengths
        return Err(corrupt(format!(
            "the header lists {expected} steps in {} frames, but {} step rows are stored; the store lost or gained rows",
            lens.len(),
            step_rows.len()
        )));
    }
    let mut steps: Vec<Vec<Option<StepState>>> =
        lens.iter().map(|&n| vec![None; n as usize]).collect();
    for (key, at, blob) in step_rows {
        let slot = steps
            .get_mut(at.frame.ix())
            .and_then(|fr| fr.get_mut(at.ix()))
            .ok_or_else(|| {
                corrupt(format!(
                    "row {key} (frame {}, step {}) is outside the run",
                    at.frame.0, at.step
                ))
            })?;
        if slot.is_some() {
            return Err(corrupt(format!("row {key} is stored twice")));
        }
        let mut state: StepState = serde_json::from_slice(blob)
            .map_err(|e| corrupt(format!("row {key} does not decode: {e}")))?;
        if let Some(n) = state.item_rows.take() {
            let list = decode_items(at, n, item_rows.remove(&at).unwrap_or_default())
                .map_err(|why| corrupt(format!("row {key}: {why}")))?;
            state.items = crate::interp::Items::stored(list);
        }
        *slot = Some(state);
    }
    // item rows of a step whose row names fewer (or none) are left over from
    // an earlier, longer list of the same step (a reset, a re-run): ignored
    steps
        .into_iter()
        .enumerate()
        .map(|(f, frame)| {
            frame
                .into_iter()
                .enumerate()
                .map(|(s, st)| {
                    st.ok_or_else(|| corrupt(format!("the row of frame {f}, step {s} is missing")))
                })
                .collect()
        })
        .collect()
}

/// The `n` items of step `at` from its item rows (rows at `n` or beyond are
/// left over from a longer list and skipped).
fn decode_items(at: StepAt, n: u32, rows: Vec<(u32, &[u8])>) -> Result<Vec<ItemState>, String> {
    let present = rows.iter().filter(|(k, _)| *k < n).count();
    if present != n as usize {
        // checked before allocating n slots
        return Err(format!(
            "the step names {n} item rows, but {present} are stored for frame {}, step {}",
            at.frame.0, at.step
        ));
    }
    let mut list: Vec<Option<ItemState>> = vec![None; n as usize];
    for (k, blob) in rows {
        let Some(slot) = list.get_mut(k as usize) else {
            continue;
        };
        if slot.is_some() {
            return Err(format!("item {k} is stored twice"));
        }
        let item =
            serde_json::from_slice(blob).map_err(|e| format!("item {k} does not decode: {e}"))?;
        *slot = Some(item);
    }
    // every slot is filled: n distinct keys below n were counted above
    Ok(list.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::interp::StepStatus;

    fn at() -> StepAt {
        StepAt::new(FrameIx::ENTRY, 1)
    }

    fn fanout(n: usize) -> StepState {
        let mut st = StepState {
            status: StepStatus::Running,
            ..StepState::default()
        };
        st.items.set(
            (0..n)
                .map(|k| ItemState {
                    value: json!(k),
                    ..ItemState::default()
                })
                .collect(),
        );
        st
    }

    fn steps_with(st: StepState) -> Vec<Vec<StepState>> {
        vec![vec![StepState::default(), st]]
    }

    fn keys(rows: &[(u64, Vec<u8>)]) -> Vec<Option<u32>> {
        rows.iter()
            .map(|(k, _)| RowKey::from_raw(*k).slot().item)
            .collect()
    }

    fn decode(rows: &[(u64, Vec<u8>)]) -> Result<Vec<Vec<StepState>>, String> {
        decode_steps(
            "run `r`",
            &[2],
            rows.iter().map(|(k, b)| (*k, b.as_slice())),
            &mut Vec::new(),
        )
    }

    fn all_rows(steps: &mut [Vec<StepState>]) -> Vec<(u64, Vec<u8>)> {
        let dirty = [
            RowKey::step(StepAt::new(FrameIx::ENTRY, 0)),
            RowKey::step(at()),
        ]
        .into();
        encode_dirty(&dirty, steps)
    }

    #[test]
    fn a_report_on_one_item_writes_that_item_and_the_small_step_row() {
        let mut steps = steps_with(fanout(1000));
        let first = all_rows(&mut steps);
        assert_eq!(first.len(), 2 + 1000, "a new list is written whole");
        steps[0][1].items.committed();
        steps[0][1].items.get_mut(417).unwrap().status = StepStatus::Succeeded;
        let rows = encode_dirty(&[RowKey::step(at())].into(), &mut steps);
        assert_eq!(keys(&rows), vec![None, Some(417)]);
        let step_row = &rows[0].1;
        assert!(
            step_row.len() < 400,
            "the step row holds no item: {} bytes",
            step_row.len()
        );
        assert_eq!(
            steps[0][1].items.len(),
            1000,
            "the list is put back after encoding"
        );
    }

    #[test]
    fn stored_rows_decode_to_the_same_steps() {
        let mut steps = steps_with(fanout(5));
        steps[0][1].items.get_mut(3).unwrap().output = Some(json!({"ok": true}));
        let rows = all_rows(&mut steps);
        let back = decode(&rows).unwrap();
        assert_eq!(back, steps);
        assert_eq!(
            back[0][1].item_rows, None,
            "the count lives only in the stored row"
        );
        assert_eq!(
            back[0][1].items.changed().count(),
            0,
            "loaded items are unchanged"
        );
    }

    #[test]
    fn rows_with_embedded_items_still_load_and_are_then_written_as_item_rows() {
        let st = fanout(3);
        let legacy = serde_json::to_vec(&st).unwrap();
        assert!(String::from_utf8_lossy(&legacy).contains("\"items\":["));
        let rows = vec![
            (
                RowKey::step(StepAt::new(FrameIx::ENTRY, 0)).raw(),
                encode(&StepState::default()),
            ),
            (RowKey::step(at()).raw(), legacy),
        ];
        let mut back = decode(&rows).unwrap();
        assert_eq!(back[0][1].items.len(), 3);
        let rewritten = encode_dirty(&[RowKey::step(at())].into(), &mut back);
        assert_eq!(keys(&rewritten), vec![None, Some(0), Some(1), Some(2)]);
    }

    #[test]
    fn item_rows_beyond_the_count_are_leftovers_and_a_missing_one_is_corrupt() {
        let mut long = steps_with(fanout(4));
        let mut rows = all_rows(&mut long);
        // the step is reset and re-run with two items: rows 2 and 3 stay behind
        let mut short = steps_with(fanout(2));
        let newer = all_rows(&mut short);
        rows.retain(|(k, _)| RowKey::from_raw(*k).slot().item.is_some_and(|i| i >= 2));
        rows.extend(newer);
        rows.sort_by_key(|(k, _)| *k);
        assert_eq!(decode(&rows).unwrap(), short);

        let mut gone = all_rows(&mut steps_with(fanout(3)));
        gone.retain(|(k, _)| RowKey::from_raw(*k).slot().item != Some(1));
        let err = decode(&gone).unwrap_err();
        assert!(err.contains("names 3 item rows, but 2 are stored"), "{err}");
    }

    #[test]
    fn a_reset_step_has_no_items_whatever_rows_are_left() {
        let mut steps = steps_with(fanout(3));
        let mut rows = all_rows(&mut steps);
        steps[0][1] = StepState::default();
        let reset = encode_dirty(&[RowKey::step(at())].into(), &mut steps);
        assert_eq!(keys(&reset), vec![None]);
        rows.retain(|(k, _)| *k != RowKey::step(at()).raw());
        rows.extend(reset);
        rows.sort_by_key(|(k, _)| *k);
        assert!(decode(&rows).unwrap()[0][1].items.is_empty());
    }

    #[test]
    fn a_huge_item_count_in_a_damaged_row_is_refused_before_allocating() {
        let st = StepState {
            item_rows: Some(u32::MAX),
            ..StepState::default()
        };
        let rows = vec![
            (
                RowKey::step(StepAt::new(FrameIx::ENTRY, 0)).raw(),
                encode(&StepState::default()),
            ),
            (RowKey::step(at()).raw(), encode(&st)),
        ];
        assert!(
            decode(&rows)
                .unwrap_err()
                .contains("names 4294967295 item rows")
        );
    }

    /// A run started from the format-3 fixture plan, as the engine holds it.
    fn started() -> Run {
        let bytes = include_bytes!("../../tests/fixtures/v3-plan.stratumc");
        let (plan, hash) = crate::plan::file::load(bytes).unwrap();
        let index = crate::interp::PlanIndex::new(&plan);
        let mut host = crate::host::StdHost::for_root(None).unwrap();
        let input = json!({"items": (0..500).map(|k| format!("item {k}")).collect::<Vec<_>>()});
        let (run, _) = crate::interp::start(
            &plan,
            &index,
            &hash.to_hex(),
            "run-t",
            None,
            input,
            None,
            &mut host,
        )
        .unwrap();
        run
    }

    fn stored(run: &mut Run) -> (Vec<u8>, Vec<(u64, Vec<u8>)>) {
        let rows = dirty_rows(run);
        let header = encode_header(&mut run.header);
        committed(run);
        (header, rows)
    }

    #[test]
    fn frame_inputs_are_written_once_as_rows_and_not_in_the_header() {
        let mut run = started();
        let (header, rows) = stored(&mut run);
        let input_key = RowKey::frame_input(FrameIx::ENTRY).raw();
        assert!(rows.iter().any(|(k, _)| *k == input_key));
        assert!(
            !String::from_utf8_lossy(&header).contains("item 499"),
            "the header holds no input"
        );
        let (back, steps) = decode_run(
            "run `t`",
            &header,
            rows.iter().map(|(k, b)| (*k, b.as_slice())),
        )
        .unwrap();
        assert_eq!(back.frames, run.header.frames);
        assert_eq!(steps, run.steps);
        // the next transition writes no input again
        run.dirty.clear();
        assert!(dirty_rows(&mut run).iter().all(|(k, _)| *k != input_key));
        // and a header without its input row is damage
        let without: Vec<_> = rows.iter().filter(|(k, _)| *k != input_key).collect();
        let err = decode_run(
            "run `t`",
            &header,
            without.iter().map(|(k, b)| (*k, b.as_slice())),
        )
        .unwrap_err();
        assert!(err.contains("the input row of frame 0 is missing"), "{err}");
    }

    #[test]
    fn a_header_that_embeds_the_inputs_still_loads_and_then_moves_them_to_rows() {
        let mut run = started();
        let (_, rows) = stored(&mut run);
        // a header as written before inputs had rows: the input inside, no flag
        let mut legacy = serde_json::to_value(&run.header).unwrap();
        legacy["frames"][0]["input"] = serde_json::to_value(&*run.header.frames[0].input).unwrap();
        legacy.as_object_mut().unwrap().remove("inputs_apart");
        let legacy = serde_json::to_vec(&legacy).unwrap();
        let step_rows: Vec<_> = rows
            .iter()
            .filter(|(k, _)| RowKey::from_raw(*k).input_of().is_none())
            .collect();
        let (header, steps) = decode_run(
            "run `t`",
            &legacy,
            step_rows.iter().map(|(k, b)| (*k, b.as_slice())),
        )
        .unwrap();
        assert_eq!(header.frames[0].input, run.header.frames[0].input);
        let mut again = Run {
            header,
            steps,
            ..run.clone()
        };
        again.dirty.clear();
        let input_key = RowKey::frame_input(FrameIx::ENTRY).raw();
        assert!(
            dirty_rows(&mut again).iter().any(|(k, _)| *k == input_key),
            "its next commit writes the row"
        );
    }
}
