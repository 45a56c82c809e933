//! A flow network with real capacities, solved by Dinic's algorithm: the max-flow each
//! division of the targets asks (`targets`).

/// A flow network with real capacities, solved by Dinic's algorithm.
///
/// Each node's edges are kept in one array (`adj`, node `u`'s from `start[u]` to
/// `start[u + 1]`, in the order added), laid out at the first search after edges were
/// added: a division builds a network every time, and one list per node cost more than
/// the max-flow itself (the forecast's profile).
pub(super) struct Network {
    /// Each edge's tail; edge `e ^ 1` is the reverse of `e`.
    from: Vec<usize>,
    to: Vec<usize>,
    pub(super) capacity: Vec<f64>,
    residual: Vec<f64>,
    start: Vec<usize>,
    adj: Vec<usize>,
    /// `adj` holds every edge added.
    laid_out: bool,
    level: Vec<u32>,
    next: Vec<usize>,
    /// The breadth-first search's queue, kept between searches (a division runs many).
    queue: Vec<usize>,
}

impl Default for Network {
    fn default() -> Network {
        Network::new(0, 0)
    }
}

impl Network {
    /// Empties the network for one of `nodes` nodes, keeping its arrays' room.
    pub(super) fn clear(&mut self, nodes: usize) {
        self.from.clear();
        self.to.clear();
        self.capacity.clear();
        self.residual.clear();
        self.adj.clear();
        self.start.clear();
        self.start.resize(nodes + 1, 0);
        self.level.clear();
        self.level.resize(nodes, 0);
        self.next.clear();
        self.next.resize(nodes, 0);
        self.queue.clear();
        self.laid_out = true;
    }

    /// A network of `nodes` nodes with room for `edges` edges (and their reverses).
    pub(super) fn new(nodes: usize, edges: usize) -> Network {
        Network {
            from: Vec::with_capacity(2 * edges),
            to: Vec::with_capacity(2 * edges),
            capacity: Vec::with_capacity(2 * edges),
            residual: Vec::with_capacity(2 * edges),
            start: vec![0; nodes + 1],
            adj: Vec::with_capacity(2 * edges),
            laid_out: true,
            level: vec![0; nodes],
            next: vec![0; nodes],
            queue: Vec::with_capacity(nodes),
        }
    }

    /// Adds `from -> to` and its reverse; returns the forward edge.
    pub(super) fn add(&mut self, from: usize, to: usize, capacity: f64) -> usize {
        let edge = self.to.len();
        self.from.extend([from, to]);
        self.to.extend([to, from]);
        self.capacity.extend([capacity, 0.0]);
        self.residual.extend([capacity, 0.0]);
        self.laid_out = false;
        edge
    }

    /// Lays out `adj` (a counting sort of the edges by tail, stable).
    fn lay_out(&mut self) {
        if self.laid_out {
            return;
        }
        self.start.iter_mut().for_each(|s| *s = 0);
        for &u in &self.from {
            self.start[u + 1] += 1;
        }
        for u in 1..self.start.len() {
            self.start[u] += self.start[u - 1];
        }
        self.adj.clear();
        self.adj.resize(self.from.len(), 0);
        // `next` as each node's fill position.
        let nodes = self.next.len();
        self.next.copy_from_slice(&self.start[..nodes]);
        for (edge, &u) in self.from.iter().enumerate() {
            self.adj[self.next[u]] = edge;
            self.next[u] += 1;
        }
        self.laid_out = true;
    }

    /// Node `u`'s edges.
    fn out(&self, u: usize) -> &[usize] {
        &self.adj[self.start[u]..self.start[u + 1]]
    }

    pub(super) fn set_capacity(&mut self, edge: usize, capacity: f64) {
        self.capacity[edge] = capacity;
    }

    pub(super) fn reset(&mut self) {
        self.residual.copy_from_slice(&self.capacity);
    }

    pub(super) fn flow(&self, edge: usize) -> f64 {
        self.capacity[edge] - self.residual[edge]
    }

    pub(super) fn max_flow(&mut self, source: usize, sink: usize, tol: f64) -> f64 {
        self.lay_out();
        let mut total = 0.0;
        while self.levels(source, sink, tol) {
            let nodes = self.next.len();
            self.next.copy_from_slice(&self.start[..nodes]);
            loop {
                let pushed = self.push(source, sink, f64::INFINITY, tol);
                if pushed <= tol {
                    break;
                }
                total += pushed;
            }
        }
        total
    }

    fn levels(&mut self, source: usize, sink: usize, tol: f64) -> bool {
        self.level.iter_mut().for_each(|l| *l = u32::MAX);
        self.level[source] = 0;
        self.queue.clear();
        self.queue.push(source);
        let mut head = 0;
        while let Some(&u) = self.queue.get(head) {
            head += 1;
            for &edge in &self.adj[self.start[u]..self.start[u + 1]] {
                let v = self.to[edge];
                if self.residual[edge] > tol && self.level[v] == u32::MAX {
                    self.level[v] = self.level[u] + 1;
                    self.queue.push(v);
                }
            }
        }
        self.level[sink] != u32::MAX
    }

    fn push(&mut self, u: usize, sink: usize, limit: f64, tol: f64) -> f64 {
        if u == sink {
            return limit;
        }
        while self.next[u] < self.start[u + 1] {
            let edge = self.adj[self.next[u]];
            let v = self.to[edge];
            if self.residual[edge] > tol && self.level[v] == self.level[u] + 1 {
                let pushed = self.push(v, sink, limit.min(self.residual[edge]), tol);
                if pushed > tol {
                    self.residual[edge] -= pushed;
                    self.residual[edge ^ 1] += pushed;
                    return pushed;
                }
            }
            self.next[u] += 1;
        }
        0.0
    }

    /// Which nodes can still send flow to the sink in the residual network.
    pub(super) fn reaches_sink(&self, sink: usize, tol: f64) -> Vec<bool> {
        let mut reaches = vec![false; self.level.len()];
        reaches[sink] = true;
        let mut queue = vec![sink];
        while let Some(v) = queue.pop() {
            for &edge in self.out(v) {
                // `edge` leaves v; its reverse enters v from `to[edge]`.
                let u = self.to[edge];
                if !reaches[u] && self.residual[edge ^ 1] > tol {
                    reaches[u] = true;
                    queue.push(u);
                }
            }
        }
        reaches
    }
}
