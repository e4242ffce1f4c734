//! The step graph of one flow: edges by kind, cycle breaking, reachability,
//! reset closures (computed here once per back edge and recorded in the IR)
//! and a deterministic topological order.
//!
//! Owns: graph algorithms, all iterative (no recursion on user-sized input).
//! Must never: produce diagnostics; callers word them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::ir::{Edge, EdgeKind, ResetIr, StepId};
use crate::source::Span;

/// The edges between the steps of a flow.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    n: usize,
    /// Accepted edges, in insertion order.
    pub edges: Vec<Edge>,
    spans: Vec<Span>,
    out: Vec<Vec<usize>>,
    inc: Vec<Vec<usize>>,
}

impl Graph {
    /// An empty graph over `n` steps.
    pub fn new(n: usize) -> Graph {
        Graph {
            n,
            edges: Vec::new(),
            spans: Vec::new(),
            out: vec![Vec::new(); n],
            inc: vec![Vec::new(); n],
        }
    }

    /// Adds an edge (duplicates are kept once).
    pub fn add(&mut self, from: StepId, to: StepId, kind: EdgeKind, span: Span) {
        if self.out[from]
            .iter()
            .any(|&e| self.edges[e].to == to && self.edges[e].kind == kind)
        {
            return;
        }
        let e = self.edges.len();
        self.edges.push(Edge { from, to, kind });
        self.spans.push(span);
        self.out[from].push(e);
        self.inc[to].push(e);
    }

    fn is_acyclic(&self) -> bool {
        let mut indeg: Vec<usize> = self.inc.iter().map(Vec::len).collect();
        let mut queue: Vec<usize> = (0..self.n).filter(|&i| indeg[i] == 0).collect();
        let mut seen = 0;
        while let Some(v) = queue.pop() {
            seen += 1;
            for &e in &self.out[v] {
                let t = self.edges[e].to;
                indeg[t] -= 1;
                if indeg[t] == 0 {
                    queue.push(t);
                }
            }
        }
        seen == self.n
    }

    /// Removes every edge that closes a cycle, in insertion order, and returns them.
    ///
    /// Linear when the graph is acyclic (the common case); otherwise the edges
    /// are re-added one by one and each is tested against the edges before it.
    pub fn break_cycles(&mut self) -> Vec<(StepId, StepId, EdgeKind, Span)> {
        if self.is_acyclic() {
            return Vec::new();
        }
        let edges = std::mem::take(&mut self.edges);
        let spans = std::mem::take(&mut self.spans);
        *self = Graph::new(self.n);
        let mut removed = Vec::new();
        for (e, span) in edges.into_iter().zip(spans) {
            if self.reaches(e.to, e.from, false) {
                removed.push((e.from, e.to, e.kind, span));
            } else {
                self.add(e.from, e.to, e.kind, span);
            }
        }
        removed
    }

    /// Whether `a` reaches `b` (`deps_only`: through order and data edges only).
    pub fn reaches(&self, a: StepId, b: StepId, deps_only: bool) -> bool {
        if a == b {
            return true;
        }
        let mut seen = vec![false; self.n];
        let mut stack = vec![a];
        seen[a] = true;
        while let Some(v) = stack.pop() {
            for &e in &self.out[v] {
                let edge = self.edges[e];
                if deps_only && !edge.kind.is_dependency() {
                    continue;
                }
                if edge.to == b {
                    return true;
                }
                if !seen[edge.to] {
                    seen[edge.to] = true;
                    stack.push(edge.to);
                }
            }
        }
        false
    }

    /// A path of steps from `a` to `b` (both included), if one exists.
    pub fn path(&self, a: StepId, b: StepId) -> Option<Vec<StepId>> {
        let mut prev = vec![usize::MAX; self.n];
        let mut queue = VecDeque::from([a]);
        prev[a] = a;
        while let Some(v) = queue.pop_front() {
            if v == b {
                let mut path = vec![b];
                let mut cur = b;
                while cur != a {
                    cur = prev[cur];
                    path.push(cur);
                }
                path.reverse();
                return Some(path);
            }
            for &e in &self.out[v] {
                let t = self.edges[e].to;
                if prev[t] == usize::MAX {
                    prev[t] = v;
                    queue.push_back(t);
                }
            }
        }
        None
    }

    /// Steps that reach `b` (`deps_only`: through dependency edges only).
    pub fn ancestors(&self, b: StepId, deps_only: bool) -> Vec<bool> {
        let mut seen = vec![false; self.n];
        let mut stack = vec![b];
        while let Some(v) = stack.pop() {
            for &e in &self.inc[v] {
                let edge = self.edges[e];
                if deps_only && !edge.kind.is_dependency() {
                    continue;
                }
                if !seen[edge.from] {
                    seen[edge.from] = true;
                    stack.push(edge.from);
                }
            }
        }
        seen
    }

    /// What the back edge `from` → `target` resets: `target` and every step
    /// reachable from it through any forward edge. The one computation of a
    /// reset region, for a gate's `on_revise` (and, in 1.1, `route: goto`);
    /// lowering, cost and the graph picture read it from [`FlowIr::resets`].
    ///
    /// [`FlowIr::resets`]: crate::ir::FlowIr::resets
    pub fn reset_closure(&self, from: StepId, target: StepId) -> ResetIr {
        let mut seen = vec![false; self.n];
        seen[target] = true;
        let mut stack = vec![target];
        while let Some(v) = stack.pop() {
            for &e in &self.out[v] {
                let t = self.edges[e].to;
                if !seen[t] {
                    seen[t] = true;
                    stack.push(t);
                }
            }
        }
        ResetIr {
            from,
            target,
            steps: seen,
        }
    }

    /// Direct dependency predecessors of `b`.
    pub fn dependencies(&self, b: StepId) -> impl Iterator<Item = StepId> + '_ {
        self.inc[b]
            .iter()
            .map(|&e| self.edges[e])
            .filter(|e| e.kind.is_dependency())
            .map(|e| e.from)
    }

    /// Whether some route (`on_fail`, `on_approve`, `on_kill`) targets `b`.
    pub fn is_route_target(&self, b: StepId) -> bool {
        self.inc[b]
            .iter()
            .any(|&e| !self.edges[e].kind.is_dependency())
    }

    /// Data-edge successors of `a`.
    pub fn data_successors(&self, a: StepId) -> impl Iterator<Item = StepId> + '_ {
        self.out[a]
            .iter()
            .map(|&e| self.edges[e])
            .filter(|e| e.kind == EdgeKind::Data)
            .map(|e| e.to)
    }

    /// A topological order of all edges; among ready steps, document order first.
    pub fn topo_order(&self) -> Vec<StepId> {
        let mut indeg: Vec<usize> = self.inc.iter().map(Vec::len).collect();
        let mut heap: BinaryHeap<Reverse<usize>> = (0..self.n)
            .filter(|&i| indeg[i] == 0)
            .map(Reverse)
            .collect();
        let mut order = Vec::with_capacity(self.n);
        while let Some(Reverse(v)) = heap.pop() {
            order.push(v);
            for &e in &self.out[v] {
                let t = self.edges[e].to;
                indeg[t] -= 1;
                if indeg[t] == 0 {
                    heap.push(Reverse(t));
                }
            }
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_are_broken_at_the_closing_edge() {
        let mut g = Graph::new(3);
        g.add(0, 1, EdgeKind::Order, Span::at(1));
        g.add(1, 2, EdgeKind::Order, Span::at(2));
        g.add(2, 0, EdgeKind::Data, Span::at(3));
        let removed = g.break_cycles();
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].3, Span::at(3));
        assert_eq!(g.topo_order(), vec![0, 1, 2]);
        assert_eq!(g.path(0, 2), Some(vec![0, 1, 2]));
    }

    #[test]
    fn reachability_by_kind() {
        let mut g = Graph::new(3);
        g.add(0, 1, EdgeKind::OnFail, Span::at(0));
        g.add(1, 2, EdgeKind::Order, Span::at(0));
        assert!(g.reaches(0, 2, false));
        assert!(!g.reaches(0, 2, true));
        assert_eq!(g.ancestors(2, true), vec![false, true, false]);
        let reset = g.reset_closure(2, 0);
        assert_eq!((reset.from, reset.target), (2, 0));
        assert_eq!(reset.steps, vec![true, true, true]);
        assert_eq!(g.reset_closure(0, 1).steps, vec![false, true, true]);
    }

    #[test]
    fn state_edges_order_like_dependencies() {
        // X1: `${a.status}` in c orders c after a (C4 holds), but carries no data
        let mut g = Graph::new(3);
        g.add(0, 2, EdgeKind::State, Span::at(0));
        g.add(1, 2, EdgeKind::Data, Span::at(0));
        assert!(g.reaches(0, 2, true));
        assert_eq!(g.ancestors(2, true), vec![true, true, false]);
        assert_eq!(g.data_successors(0).count(), 0);
        assert_eq!(g.data_successors(1).collect::<Vec<_>>(), vec![2]);
        assert!(!g.is_route_target(2));
    }
}
