//! Targets y(P,R): how many instances of each resource type each project should hold
//! now. The division is weighted max-min fair in processing (instances x speed): it
//! raises every project's processing in proportion to its share until a resource or the
//! project's own work stops it (progressive filling), freezes the projects that cannot
//! grow, and goes on with the rest. Which projects can take what is a flow network
//! (project -> resource type -> sink), so each step is a max-flow feasibility test.
//!
//! This is the correction described in docs/design.md#5-fair-share: per-resource debts
//! alone split the GPU 50/50 in the source's own example; accruing toward these targets
//! gives the stated 75/25.

use super::flow::Network;
use super::project::Share;
use super::resource::Speed;

/// One resource type as the division sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    /// Instances available to the eligible projects (may be fractional).
    pub instances: f64,
    /// Processing per instance-second.
    pub speed: Speed,
}

/// One project as the division sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Demand {
    /// Its resource share; 0 gets nothing.
    pub share: Share,
    /// Per resource type (same order as the capacities): the most instances its running
    /// and pending claims could use there; 0 where it is not eligible (D(P,R) false).
    pub caps: Vec<f64>,
}

/// The weighted max-min fair division: `result[p][r]` is y(P,R) in instances.
///
/// Guarantees sum over P of y(P,R) <= instances(R) and y(P,R) <= caps[r], and that no
/// project's processing per share can be raised without lowering that of a project whose
/// processing per share is no larger.
pub fn targets(resources: &[Capacity], demands: &[Demand]) -> Vec<Vec<f64>> {
    Divider::default().targets(resources, demands)
}

/// What divisions keep from one to the next: the arrays of the flow network that splits
/// each one across the types, cleared and filled again each time (a busy ledger divides
/// thousands of times, and allocating them cost about as much as the max-flow).
#[derive(Default)]
pub struct Divider {
    net: Network,
    /// The filling's arrays ([`Divider::by_cuts`]), likewise.
    cuts: Cuts,
    active: Vec<usize>,
    room: Vec<f64>,
    /// Per active project its edges (type, capacity); rows past the active ones are kept
    /// only for their room.
    reach: Vec<Vec<(usize, f64)>>,
    frozen: Vec<Option<f64>>,
    stopped: Vec<bool>,
    x: Vec<f64>,
}

impl Clone for Divider {
    /// Scratch space only: a copy starts with its own, empty.
    fn clone(&self) -> Divider {
        Divider::default()
    }
}

impl std::fmt::Debug for Divider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Divider")
    }
}

impl Divider {
    /// [`targets`], on this divider's network.
    pub fn targets(&mut self, resources: &[Capacity], demands: &[Demand]) -> Vec<Vec<f64>> {
        self.by_cuts(resources, demands).unwrap_or_else(|| {
            // Counted with the ledger's divisions (accrual.rs).
            tracing::trace!(target: "gpuboard::division", outcome = "afresh, on the network");
            divide(resources, demands, CUT_TYPES)
        })
    }
}

/// What [`narrowed`] found.
#[derive(Clone, Debug, PartialEq)]
pub enum Narrowed {
    /// The division stands as it is.
    Stands,
    /// The same processing per project, split again across the types.
    Split(Vec<Vec<f64>>),
}

/// Why [`narrowed`] could not keep a division: it must be made afresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Afresh {
    /// Other projects, types, shares or speeds.
    Changed,
    /// A type has more instances than before (`r`).
    TypeGrew(usize),
    /// A project's cap on a type is larger than before (`project`, `r`).
    CapGrew(usize, usize),
    /// Everything narrowed, but the narrower inputs cannot carry each project's
    /// processing; `own` when a project's own caps no longer can (its work fell below
    /// its part), else the types are too small together.
    NotCarried {
        /// Some project's caps together are below its processing.
        own: bool,
    },
}

impl Divider {
    /// The division for `after` worked out from `y`, the one made for `before`, without
    /// dividing again, when `after` only narrows what `before` allowed (the same projects,
    /// shares and speeds; no type's instances and no project's cap larger): the fairest
    /// division of a set is the fairest of any part of it that still holds it, and each
    /// project's processing in a weighted max-min fair division is unique. So `y` stands while
    /// it fits `after`; else each project's processing in `y` is split again across the types
    /// (one max-flow), if `after` still carries it all. `Err`: divide afresh, and why. Most
    /// changes of a busy endpoint narrow: a claim ends (its project's cap falls) or a waiting
    /// claim is placed (the caps of the types it did not go to fall).
    pub fn narrowed(
        &mut self,
        before: (&[Capacity], &[Demand]),
        after: (&[Capacity], &[Demand]),
        y: &[&[f64]],
    ) -> Result<Narrowed, Afresh> {
        let ((res0, dem0), (res1, dem1)) = (before, after);
        if res0.len() != res1.len() || dem0.len() != dem1.len() || y.len() != dem1.len() {
            return Err(Afresh::Changed);
        }
        let m = res1.len();
        let mut fits = true;
        for (r, (a, b)) in res0.iter().zip(res1).enumerate() {
            let (was, now) = (a.instances.max(0.0), b.instances.max(0.0));
            if a.speed != b.speed {
                return Err(Afresh::Changed);
            }
            if now > was {
                return Err(Afresh::TypeGrew(r));
            }
            if now < was {
                let handed: f64 = y.iter().map(|row| row.get(r).copied().unwrap_or(0.0)).sum();
                fits &= handed <= now;
            }
        }
        for (p, ((a, b), row)) in dem0.iter().zip(dem1).zip(y).enumerate() {
            if a.share != b.share || row.len() != m {
                return Err(Afresh::Changed);
            }
            for r in 0..m {
                let was = cap_of(a, r).min(res0[r].instances.max(0.0));
                let now = cap_of(b, r).min(res1[r].instances.max(0.0));
                if now > was {
                    return Err(Afresh::CapGrew(p, r));
                }
                fits &= row[r] <= now;
            }
        }
        if fits {
            return Ok(Narrowed::Stands);
        }
        // A project whose caps together fall short of its processing by more than the
        // max-flow's tolerance cannot be carried: known without the max-flow, and the most
        // common reason a division is made afresh (a holder of a project at its own cap ends).
        let tol = 1e-9 * res1.iter().map(room_of).sum::<f64>().max(1.0);
        let mut own = false;
        for (d, row) in dem1.iter().zip(y) {
            let (mut x, mut most) = (0.0, 0.0);
            for (r, res) in res1.iter().enumerate() {
                x += row[r] * res.speed.gflops();
                most += cap_of(d, r).min(res.instances.max(0.0)) * res.speed.gflops();
            }
            if most < x - tol {
                return Err(Afresh::NotCarried { own: true });
            }
            own |= most < x * (1.0 - 1e-9);
        }
        split(&mut self.net, res1, dem1, y)
            .map(Narrowed::Split)
            .ok_or(Afresh::NotCarried { own })
    }
}

/// Each project's processing in `y` split again across the types of `resources` and
/// `demands` by one max-flow; `None` when they cannot carry it all.
fn split(
    net: &mut Network,
    resources: &[Capacity],
    demands: &[Demand],
    y: &[&[f64]],
) -> Option<Vec<Vec<f64>>> {
    let x: Vec<f64> = y
        .iter()
        .map(|row| {
            row.iter()
                .zip(resources)
                .map(|(t, res)| t * res.speed.gflops())
                .sum()
        })
        .collect();
    split_processing(net, resources, demands, &x)
}

/// Processing `x[p]` of each project split across the types by one max-flow; `None` when
/// the types and caps cannot carry it all.
fn split_processing(
    net: &mut Network,
    resources: &[Capacity],
    demands: &[Demand],
    x: &[f64],
) -> Option<Vec<Vec<f64>>> {
    let (n, m) = (demands.len(), resources.len());
    let (source, sink) = (0, n + m + 1);
    net.clear(n + m + 2);
    let mut total = 0.0;
    for (r, res) in resources.iter().enumerate() {
        let c = res.instances.max(0.0) * res.speed.gflops();
        total += c;
        net.add(n + 1 + r, sink, c);
    }
    let tol = 1e-9 * total.max(1.0);
    let mut wanted = 0.0;
    let mut edges = Vec::with_capacity(n * m);
    for (p, d) in demands.iter().enumerate() {
        let x = x.get(p).copied().unwrap_or(0.0);
        wanted += x;
        net.add(source, p + 1, x);
        for (r, res) in resources.iter().enumerate() {
            let instances = cap_of(d, r).min(res.instances.max(0.0));
            if instances > 0.0 && x > 0.0 {
                edges.push((
                    p,
                    r,
                    net.add(p + 1, n + 1 + r, instances * res.speed.gflops()),
                ));
            }
        }
    }
    if net.max_flow(source, sink, tol) < wanted - tol {
        return None;
    }
    let mut result = vec![vec![0.0; m]; n];
    for (p, r, edge) in edges {
        let instances = (net.flow(edge) / resources[r].speed.gflops()).max(0.0);
        result[p][r] = instances.min(cap_of(&demands[p], r));
    }
    Some(result)
}

impl Divider {
    /// The division found on the cuts alone (at most [`CUT_TYPES`] types): the progressive
    /// filling reads from the 2^m cuts both the level at which one fills and which projects
    /// it stops (those that send into a full cut, or have reached their own limit), with no
    /// max-flow; one max-flow then splits each project's processing across the types. `None`
    /// where rounding leaves a round that stops no project, or the split falls short: the
    /// caller divides on the network instead ([`divide`]).
    fn by_cuts(&mut self, resources: &[Capacity], demands: &[Demand]) -> Option<Vec<Vec<f64>>> {
        let m = resources.len();
        if m > CUT_TYPES {
            return None;
        }
        let Divider {
            net,
            cuts,
            active,
            room,
            reach,
            frozen,
            stopped,
            x,
        } = self;
        active.clear();
        active.extend((0..demands.len()).filter(|&p| {
            demands[p].share.get() > 0
                && (0..m).any(|r| cap_of(&demands[p], r) > 0.0 && resources[r].instances > 0.0)
        }));
        room.clear();
        room.extend(resources.iter().map(room_of));
        let tol = 1e-9 * room.iter().sum::<f64>().max(1.0);
        let n = active.len();
        if reach.len() < n {
            reach.resize_with(n, Vec::new);
        }
        for (e, &p) in reach.iter_mut().zip(active.iter()) {
            e.clear();
            e.extend((0..m).filter_map(|r| {
                let instances = cap_of(&demands[p], r).min(resources[r].instances.max(0.0));
                (instances > 0.0).then(|| (r, instances * resources[r].speed.gflops()))
            }));
        }
        let weight = active.iter().map(|&p| f64::from(demands[p].share.get()));
        cuts.fill(room, &reach[..n], weight, tol);
        frozen.clear();
        frozen.resize(n, None);
        let mut low = 0.0_f64;
        while frozen.iter().any(Option::is_none) {
            let high = (0..n)
                .filter(|&i| frozen[i].is_none())
                .map(|i| cuts.most[i] / cuts.weight[i])
                .fold(low, f64::max);
            let level = cuts.level(frozen, low, high);
            cuts.stopped(frozen, level, stopped);
            if !stopped.iter().any(|&s| s) {
                return None;
            }
            for i in 0..n {
                // Only a growing project stops, and its demand reads only its own entry.
                if stopped[i] {
                    frozen[i] = Some(cuts.demand(frozen, i, level));
                }
            }
            low = level;
        }
        x.clear();
        x.resize(demands.len(), 0.0);
        for (i, &p) in active.iter().enumerate() {
            x[p] = frozen[i].unwrap_or(0.0);
        }
        split_processing(net, resources, demands, x)
    }
}

/// [`targets`], finding levels from the cuts when there are at most `cut_types` types
/// (0: by bisection alone, as the tests compare).
// One progressive filling over one flow network: the network, the level and the frozen
// projects are the algorithm's state, and each step reads all three.
#[allow(clippy::too_many_lines)]
fn divide(resources: &[Capacity], demands: &[Demand], cut_types: usize) -> Vec<Vec<f64>> {
    let m = resources.len();
    let mut result = vec![vec![0.0; m]; demands.len()];
    // Only projects with a share and somewhere to run take part.
    let active: Vec<usize> = (0..demands.len())
        .filter(|&p| {
            demands[p].share.get() > 0
                && (0..m).any(|r| cap_of(&demands[p], r) > 0.0 && resources[r].instances > 0.0)
        })
        .collect();
    if active.is_empty() {
        return result;
    }
    let n = active.len();
    let source = 0;
    let sink = n + m + 1;
    let mut net = Network::new(n + m + 2, m + n + n * m);
    let mut total = 0.0;
    let mut resource_edge = Vec::with_capacity(m);
    for (r, res) in resources.iter().enumerate() {
        let c = res.instances.max(0.0) * res.speed.gflops();
        total += c;
        resource_edge.push(net.add(n + 1 + r, sink, c));
    }
    let tol = 1e-9 * total.max(1.0);
    let mut source_edge = Vec::with_capacity(n);
    let mut project_edges: Vec<Vec<(usize, usize)>> = Vec::with_capacity(n);
    // The same edges' capacities, for the cuts.
    let mut reach: Vec<Vec<(usize, f64)>> = Vec::with_capacity(n);
    let mut most = Vec::with_capacity(n);
    let weight: Vec<f64> = active
        .iter()
        .map(|&p| f64::from(demands[p].share.get()))
        .collect();
    for (i, &p) in active.iter().enumerate() {
        source_edge.push(net.add(source, i + 1, 0.0));
        let mut edges = Vec::new();
        let mut caps = Vec::new();
        let mut alone = 0.0;
        for (r, res) in resources.iter().enumerate() {
            let instances = cap_of(&demands[p], r).min(res.instances.max(0.0));
            if instances > 0.0 {
                let c = instances * res.speed.gflops();
                alone += c;
                edges.push((r, net.add(i + 1, n + 1 + r, c)));
                caps.push((r, c));
            }
        }
        most.push(alone);
        project_edges.push(edges);
        reach.push(caps);
    }
    let room: Vec<f64> = resource_edge.iter().map(|&e| net.capacity[e]).collect();
    let min_weight = weight.iter().copied().fold(f64::INFINITY, f64::min);
    let mut cuts = (m <= cut_types).then(|| {
        let mut cuts = Cuts::default();
        cuts.fill(&room, &reach, weight.iter().copied(), tol);
        cuts
    });

    // frozen[i]: the processing project i is held at; None while it still grows.
    let mut frozen: Vec<Option<f64>> = vec![None; n];
    let demand_at = |frozen: &[Option<f64>], i: usize, level: f64| {
        frozen[i].unwrap_or((weight[i] * level).min(most[i]))
    };
    let feasible = |net: &mut Network, frozen: &[Option<f64>], level: f64| {
        let mut wanted = 0.0;
        for (i, &edge) in source_edge.iter().enumerate() {
            let d = demand_at(frozen, i, level);
            net.set_capacity(edge, d);
            wanted += d;
        }
        net.reset();
        net.max_flow(source, sink, tol) >= wanted - tol
    };
    // What the network carries for a project at the level it was last solved for: where
    // it freezes. Not its demand there: the level is found to a tolerance, and a demand a
    // little above what the network can carry would use up that tolerance for the rounds
    // after it, ending a later round early.
    let carried = |net: &Network, frozen: &[Option<f64>], i: usize, level: f64| {
        net.flow(source_edge[i]).min(demand_at(frozen, i, level))
    };
    // Whether the network could carry more of frozen project `i`, the others held where
    // they are: it was frozen early.
    let grows = |net: &mut Network, frozen: &[Option<f64>], i: usize| {
        let mut held = 0.0;
        for (j, &edge) in source_edge.iter().enumerate() {
            let at = frozen[j].unwrap_or(0.0);
            net.set_capacity(edge, if j == i { most[j] } else { at });
            held += at;
        }
        net.reset();
        net.max_flow(source, sink, tol) > held + 1e-6 * total.max(1.0)
    };
    let mut low = 0.0_f64;
    // Each pass fills until every project is frozen; with bisection alone (many types),
    // a pass ends by unfreezing the projects its rounding froze early, at most once per
    // project.
    for pass in 0..=n {
        while frozen.iter().any(Option::is_none) {
            let high = (0..n)
                .filter(|&i| frozen[i].is_none())
                .map(|i| most[i] / weight[i])
                .fold(low, f64::max);
            if feasible(&mut net, &frozen, high) {
                for i in 0..n {
                    frozen[i] = Some(demand_at(&frozen, i, high));
                }
                break;
            }
            let mut high = high;
            // Where a cut fills, worked out from the cuts (few types); bisection only for
            // what rounding leaves, or for many types.
            if let Some(level) = cuts.as_mut().map(|c| c.level(&frozen, low, high)) {
                // Checked on the network: carried at the level and not a little above it (past
                // the tolerance at the smallest weight); otherwise bisection goes on from it.
                let above = level + 4.0 * tol / min_weight;
                if feasible(&mut net, &frozen, level) {
                    low = level;
                    if above < high && !feasible(&mut net, &frozen, above) {
                        high = level;
                    }
                } else {
                    high = level;
                }
            }
            for _ in 0..200 {
                if high - low <= 1e-13 * high.max(f64::MIN_POSITIVE) {
                    break;
                }
                let mid = 0.5 * (low + high);
                if feasible(&mut net, &frozen, mid) {
                    low = mid;
                } else {
                    high = mid;
                }
            }
            // At the level reached, the projects that cannot send more flow to the sink are
            // bottlenecked: freeze them there.
            feasible(&mut net, &frozen, low);
            let reaches = net.reaches_sink(sink, tol);
            let mut froze_any = false;
            for i in 0..n {
                if frozen[i].is_none() && (!reaches[i + 1] || weight[i] * low >= most[i]) {
                    frozen[i] = Some(carried(&net, &frozen, i, low));
                    froze_any = true;
                }
            }
            if !froze_any {
                // Rounding left no clear bottleneck: the level is final for everyone.
                for i in 0..n {
                    if frozen[i].is_none() {
                        frozen[i] = Some(carried(&net, &frozen, i, low));
                    }
                }
            }
        }
        if m <= cut_types || pass == n {
            break;
        }
        let early: Vec<usize> = (0..n).filter(|&i| grows(&mut net, &frozen, i)).collect();
        if early.is_empty() {
            break;
        }
        // They grow again from the lowest level among them: the network carries them
        // there, since each asks no more than it was frozen at.
        low = early
            .iter()
            .filter_map(|&i| frozen[i].map(|f| f / weight[i]))
            .fold(f64::INFINITY, f64::min);
        for &i in &early {
            frozen[i] = None;
        }
    }
    feasible(&mut net, &frozen, low);
    for (i, &p) in active.iter().enumerate() {
        for &(r, edge) in &project_edges[i] {
            let speed = resources[r].speed.gflops();
            let instances = (net.flow(edge) / speed).max(0.0);
            result[p][r] = instances.min(cap_of(&demands[p], r));
        }
    }
    result
}

/// The most resource types whose sets [`Cuts::level`] goes through (2^m of them).
const CUT_TYPES: usize = 6;

/// The network's cuts, for finding the level at which one fills without bisecting.
///
/// A cut puts a set S of types on the source's side: every project's demand beyond what
/// it can send to types outside S must fit in S's capacity. The network carries every
/// demand at a level exactly when that holds for every S (max-flow min-cut). Each set's
/// room and what each project can send around it are worked out once per division: they
/// do not change from round to round, only which projects are frozen does.
#[derive(Default)]
struct Cuts {
    /// Per set (a bit per type; set 0 unused): the room of its types.
    room: Vec<f64>,
    /// Per set, per project (`set * n + i`): what it can send to the types outside the set.
    around: Vec<f64>,
    /// Per project: its share, and the most it can take (all its edges).
    weight: Vec<f64>,
    most: Vec<f64>,
    /// What a cut may be over by and still hold: rounding (`over` is flat at `room` along
    /// stretches, and a rounded point there must not end the stretch early).
    tol: f64,
    /// The bends of one set's `over`, kept between calls.
    points: Vec<f64>,
}

impl Cuts {
    /// The cuts of the types with capacities `room` (instances x speed), for projects with
    /// edges `reach` (type, capacity) and shares `weight`; the arrays of the last cuts are
    /// filled again.
    fn fill(
        &mut self,
        room: &[f64],
        reach: &[Vec<(usize, f64)>],
        weight: impl Iterator<Item = f64>,
        tol: f64,
    ) {
        let m = room.len();
        let (sets, n) = (1usize << m, reach.len());
        self.weight.clear();
        self.weight.extend(weight);
        self.most.clear();
        self.most
            .extend(reach.iter().map(|e| e.iter().map(|(_, c)| c).sum::<f64>()));
        self.room.clear();
        self.room.resize(sets, 0.0);
        self.around.clear();
        self.around.resize(sets * n, 0.0);
        for set in 1..sets {
            let inside = |r: usize| set & (1 << r) != 0;
            self.room[set] = (0..m).filter(|&r| inside(r)).map(|r| room[r]).sum();
            for (i, e) in reach.iter().enumerate() {
                self.around[set * n + i] =
                    e.iter().filter(|(r, _)| !inside(*r)).map(|(_, c)| c).sum();
            }
        }
        self.tol = tol;
    }

    /// Project `i`'s processing at `level`: where it was frozen, else its share of the
    /// level up to its own limit.
    fn demand(&self, frozen: &[Option<f64>], i: usize, level: f64) -> f64 {
        frozen[i].unwrap_or((self.weight[i] * level).min(self.most[i]))
    }

    /// What each project can send to the types outside `set`.
    fn around(&self, set: usize) -> &[f64] {
        let n = self.weight.len();
        &self.around[set * n..(set + 1) * n]
    }

    /// Into `stopped`, the growing projects that cannot grow past `level`: at their own
    /// limit, or sending into a cut that is full there (any more of theirs would pass its
    /// room).
    fn stopped(&self, frozen: &[Option<f64>], level: f64, stopped: &mut Vec<bool>) {
        let n = self.weight.len();
        stopped.clear();
        stopped.extend(
            (0..n)
                .map(|i| frozen[i].is_none() && self.weight[i] * level >= self.most[i] - self.tol),
        );
        for set in 1..self.room.len() {
            let around = self.around(set);
            let over: f64 = (0..n)
                .map(|i| (self.demand(frozen, i, level) - around[i]).max(0.0))
                .sum();
            if over >= self.room[set] - self.tol {
                for i in 0..n {
                    if frozen[i].is_none() && self.demand(frozen, i, level) >= around[i] - self.tol
                    {
                        stopped[i] = true;
                    }
                }
            }
        }
    }

    /// The highest level in `[low, high]` at which every cut holds.
    fn level(&mut self, frozen: &[Option<f64>], low: f64, high: f64) -> f64 {
        let n = self.weight.len();
        let mut level = high;
        let mut points = std::mem::take(&mut self.points);
        for set in 1..self.room.len() {
            let room = self.room[set];
            // What each project can send around the set.
            let around = self.around(set);
            let over = |l: f64| -> f64 {
                (0..n)
                    .map(|i| (self.demand(frozen, i, l) - around[i]).max(0.0))
                    .sum()
            };
            let holds = |l: f64| over(l) <= room + self.tol;
            if holds(level) {
                continue;
            }
            // `over` is piecewise linear and never falls: find where it passes `room`
            // between its bends.
            points.clear();
            points.extend(
                (0..n)
                    .filter(|&i| frozen[i].is_none())
                    .flat_map(|i| [around[i] / self.weight[i], self.most[i] / self.weight[i]])
                    .filter(|&p| p > low && p < level)
                    .chain([low, level]),
            );
            points.sort_by(f64::total_cmp);
            points.dedup();
            let k = points.partition_point(|&p| holds(p));
            if k == 0 {
                level = low;
                continue;
            }
            let (a, b) = (points[k - 1], points[k]);
            let (fa, fb) = (over(a), over(b));
            let crossing = a + (room - fa) * (b - a) / (fb - fa);
            level = level.min(crossing.clamp(a, b));
        }
        self.points = points;
        level
    }
}

/// A type's processing per second: its instances times its speed.
fn room_of(resource: &Capacity) -> f64 {
    resource.instances.max(0.0) * resource.speed.gflops()
}

fn cap_of(demand: &Demand, r: usize) -> f64 {
    demand
        .caps
        .get(r)
        .copied()
        .filter(|c| c.is_finite())
        .unwrap_or(0.0)
        .max(0.0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cap(instances: f64, speed: f64) -> Capacity {
        Capacity {
            instances,
            speed: Speed::new(speed).unwrap(),
        }
    }

    fn demand(share: u32, caps: &[f64]) -> Demand {
        Demand {
            share: Share::new(share).unwrap(),
            caps: caps.to_vec(),
        }
    }

    fn close(got: &[Vec<f64>], want: &[&[f64]]) {
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(want) {
            for (a, b) in g.iter().zip(w.iter()) {
                assert!((a - b).abs() < 1e-6, "got {got:?}, want {want:?}");
            }
        }
    }

    /// The division is `want`, and the cuts alone (one max-flow, no fallback) find it.
    fn divides(resources: &[Capacity], demands: &[Demand], want: &[&[f64]]) {
        close(&targets(resources, demands), want);
        close(
            &Divider::default().by_cuts(resources, demands).unwrap(),
            want,
        );
    }

    // Resources are [cpu, gpu] in these vectors.

    #[test]
    fn the_sources_example_is_75_25_and_cpu_to_b() {
        let resources = [cap(1.0, 1.0), cap(1.0, 2.0)];
        let demands = [demand(100, &[0.0, 1.0]), demand(100, &[1.0, 1.0])];
        divides(&resources, &demands, &[&[0.0, 0.75], &[1.0, 0.25]]);
    }

    #[test]
    fn gpu_four_times_as_fast_is_625_375() {
        let resources = [cap(1.0, 1.0), cap(1.0, 4.0)];
        let demands = [demand(100, &[0.0, 1.0]), demand(100, &[1.0, 1.0])];
        close(
            &targets(&resources, &demands),
            &[&[0.0, 0.625], &[1.0, 0.375]],
        );
    }

    #[test]
    fn a_s_part_is_one_plus_s_over_two_s() {
        for s in [1.0, 1.5, 3.0, 8.0, 100.0] {
            let resources = [cap(1.0, 1.0), cap(1.0, s)];
            let demands = [demand(100, &[0.0, 1.0]), demand(100, &[1.0, 1.0])];
            let y = targets(&resources, &demands);
            assert!(
                (y[0][1] - (1.0 + s) / (2.0 * s)).abs() < 1e-6,
                "s={s}: {y:?}"
            );
        }
    }

    #[test]
    fn unequal_shares_divide_processing_in_their_ratio() {
        // B has twice A's share: A 1 of processing (0.5 GPU), B 2 (CPU + 0.5 GPU).
        let resources = [cap(1.0, 1.0), cap(1.0, 2.0)];
        let demands = [demand(100, &[0.0, 1.0]), demand(200, &[1.0, 1.0])];
        close(&targets(&resources, &demands), &[&[0.0, 0.5], &[1.0, 0.5]]);
        // A has twice B's share but can only use the GPU: it takes it whole, B the CPU.
        let demands = [demand(200, &[0.0, 1.0]), demand(100, &[1.0, 1.0])];
        close(&targets(&resources, &demands), &[&[0.0, 1.0], &[1.0, 0.0]]);
    }

    #[test]
    fn a_project_capped_by_its_own_work_leaves_the_rest_to_others() {
        // Four GPUs; A's claims could use only 0.5; B and C split the remaining 3.5.
        let resources = [cap(0.0, 1.0), cap(4.0, 2.0)];
        let demands = [
            demand(100, &[0.0, 0.5]),
            demand(100, &[0.0, 4.0]),
            demand(100, &[0.0, 4.0]),
        ];
        close(
            &targets(&resources, &demands),
            &[&[0.0, 0.5], &[0.0, 1.75], &[0.0, 1.75]],
        );
    }

    #[test]
    fn ineligible_and_zero_share_projects_get_nothing_and_leftovers_stay_unassigned() {
        let resources = [cap(2.0, 1.0), cap(1.0, 2.0)];
        let demands = [
            demand(0, &[2.0, 1.0]),
            demand(100, &[0.0, 0.0]),
            demand(100, &[1.0, 0.0]),
        ];
        let y = targets(&resources, &demands);
        close(&y, &[&[0.0, 0.0], &[0.0, 0.0], &[1.0, 0.0]]);
    }

    #[test]
    fn several_bottlenecks_fill_in_rounds() {
        // cpu x2 speed 1, gpu x1 speed 6. A: cpu only; B: cpu only; C: gpu only; D: both.
        // Level 1: A, B, D share the CPUs... C and D share the GPU. Max-min: C and D can
        // reach higher through the GPU; A and B are frozen at the CPU level.
        let resources = [cap(2.0, 1.0), cap(1.0, 6.0)];
        let demands = [
            demand(100, &[2.0, 0.0]),
            demand(100, &[2.0, 0.0]),
            demand(100, &[0.0, 1.0]),
            demand(100, &[2.0, 1.0]),
        ];
        let y = targets(&resources, &demands);
        // A and B take the CPUs (1 each), C and D take 3 GFLOP each from the GPU.
        divides(
            &resources,
            &demands,
            &[&[1.0, 0.0], &[1.0, 0.0], &[0.0, 0.5], &[0.0, 0.5]],
        );
        for r in 0..2 {
            let used: f64 = y.iter().map(|row| row[r]).sum();
            assert!(used <= resources[r].instances + 1e-9);
        }
    }

    /// Each active project's processing per share, lowest first: what max-min fairness
    /// raises, compared lexicographically.
    fn per_share(resources: &[Capacity], demands: &[Demand], y: &[Vec<f64>]) -> Vec<f64> {
        let mut v: Vec<f64> = demands
            .iter()
            .zip(y)
            .filter(|(d, _)| d.share.get() > 0)
            .map(|(d, row)| {
                let done: f64 = row
                    .iter()
                    .zip(resources)
                    .map(|(x, r)| x * r.speed.gflops())
                    .sum();
                done / f64::from(d.share.get())
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }

    #[test]
    fn a_project_held_by_no_cut_grows_to_its_own_limit() {
        // Found by the property below: bisection stopped the fourth project at 1.98 of
        // type 0 though 1.5 instances stayed free there and nothing else could use them
        // (the third had been frozen a little above what the network could carry for it,
        // which used up the tolerance of the rounds after); the cuts, and now bisection,
        // give it its whole 3.
        let resources = [cap(5.0, 4.0), cap(2.0, 1.0), cap(3.0, 2.0)];
        let demands = [
            demand(100, &[0.5, 2.0, 0.0]),
            demand(50, &[0.5, 0.5, 0.5]),
            demand(150, &[0.5, 0.5, 2.5]),
            demand(100, &[3.0, 2.0, 0.0]),
            demand(0, &[0.0, 0.0, 0.0]),
        ];
        for y in [
            targets(&resources, &demands),
            divide(&resources, &demands, 0),
        ] {
            close(
                &y,
                &[
                    &[0.5, 2.0, 0.0],
                    &[0.5, 0.0, 0.5],
                    &[0.5, 0.0, 2.5],
                    &[3.0, 0.0, 0.0],
                    &[0.0, 0.0, 0.0],
                ],
            );
        }
    }

    proptest::proptest! {
        /// The levels found from the cuts and those found by bisection alone (the
        /// fallback with many types) give divisions that fit and are as fair as each
        /// other: every project's processing per share the same.
        #[test]
        fn cuts_and_bisection_divide_alike(
            types in proptest::collection::vec((0u32..6, 1u32..5), 1..4),
            projects in proptest::collection::vec(
                (0u32..4, proptest::collection::vec(0u32..8, 3)), 1..7),
        ) {
            let resources: Vec<Capacity> = types
                .iter()
                .map(|&(n, s)| cap(f64::from(n), f64::from(s)))
                .collect();
            let demands: Vec<Demand> = projects
                .iter()
                .map(|(share, caps)| {
                    let caps: Vec<f64> = caps
                        .iter()
                        .take(resources.len())
                        .map(|&c| f64::from(c) / 2.0)
                        .collect();
                    demand(share * 50, &caps)
                })
                .collect();
            let by_cuts = divide(&resources, &demands, CUT_TYPES);
            let by_bisection = divide(&resources, &demands, 0);
            // The cuts alone, where rounding lets them finish (else `targets` uses the first).
            let alone = Divider::default().by_cuts(&resources, &demands).unwrap_or_else(|| by_cuts.clone());
            for y in [&by_cuts, &by_bisection, &alone] {
                for (r, res) in resources.iter().enumerate() {
                    let used: f64 = y.iter().map(|row| row[r]).sum();
                    proptest::prop_assert!(used <= res.instances + 1e-9, "{y:?}");
                    for (row, d) in y.iter().zip(&demands) {
                        proptest::prop_assert!(row[r] <= cap_of(d, r) + 1e-9, "{y:?}");
                    }
                }
            }
            let bisection = per_share(&resources, &demands, &by_bisection);
            for y in [&by_cuts, &alone] {
                let cuts = per_share(&resources, &demands, y);
                for (a, b) in cuts.iter().zip(&bisection) {
                    proptest::prop_assert!(
                        (a - b).abs() <= 1e-6 * a.abs().max(1.0),
                        "cuts {y:?} vs bisection {by_bisection:?}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        /// A division kept or split again for narrower inputs (`narrowed`) fits them and
        /// gives every project the processing a division made afresh for them gives; and
        /// it stands in the common case (caps that fall and stay above the targets).
        #[test]
        fn a_kept_division_is_as_fair_as_one_made_again(
            types in proptest::collection::vec((1u32..6, 1u32..5, 0u32..3), 1..4),
            projects in proptest::collection::vec(
                (1u32..4, proptest::collection::vec((0u32..8, 0u32..3), 3)), 1..7),
        ) {
            let resources: Vec<Capacity> = types
                .iter()
                .map(|&(n, s, _)| cap(f64::from(n), f64::from(s)))
                .collect();
            let less: Vec<Capacity> = types
                .iter()
                .map(|&(n, s, less)| cap(f64::from(n.saturating_sub(less)), f64::from(s)))
                .collect();
            let m = resources.len();
            let demands: Vec<Demand> = projects
                .iter()
                .map(|(share, caps)| {
                    let caps: Vec<f64> = caps.iter().take(m).map(|&(c, _)| f64::from(c) / 2.0).collect();
                    demand(share * 50, &caps)
                })
                .collect();
            let y = targets(&resources, &demands);
            // Each cap falls by its own amount, and never below its target when the
            // amount is 0 (the kind of change most often kept).
            let after: Vec<Demand> = projects
                .iter()
                .zip(&y)
                .map(|((share, caps), row)| {
                    let caps: Vec<f64> = caps
                        .iter()
                        .take(m)
                        .zip(row)
                        .map(|(&(c, less), &t)| {
                            let c = f64::from(c) / 2.0;
                            if less == 0 { c.max(t) } else { (c - f64::from(less) / 2.0).max(0.0) }
                        })
                        .collect();
                    demand(share * 50, &caps)
                })
                .collect();
            let rows: Vec<&[f64]> = y.iter().map(Vec::as_slice).collect();
            for res in [&resources, &less] {
                let y = match Divider::default().narrowed((&resources, &demands), (res, &after), &rows) {
                    Err(_) => continue,
                    Ok(Narrowed::Stands) => y.clone(),
                    Ok(Narrowed::Split(y)) => y,
                };
                let again = targets(res, &after);
                for (r, c) in res.iter().enumerate() {
                    let used: f64 = y.iter().map(|row| row[r]).sum();
                    proptest::prop_assert!(used <= c.instances + 1e-9, "{y:?}");
                    for (row, d) in y.iter().zip(&after) {
                        proptest::prop_assert!(row[r] <= cap_of(d, r) + 1e-9, "{y:?}");
                    }
                }
                let kept = per_share(res, &after, &y);
                let made = per_share(res, &after, &again);
                for (a, b) in kept.iter().zip(&made) {
                    proptest::prop_assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0),
                        "kept {y:?}, made again {again:?}");
                }
            }
            // Nothing changed at all: it stands.
            proptest::prop_assert_eq!(
                Divider::default().narrowed((&resources, &demands), (&resources, &demands), &rows),
                Ok(Narrowed::Stands)
            );
        }
    }

    #[test]
    fn a_division_stands_is_split_again_or_is_made_again_as_the_inputs_change() {
        let resources = [cap(4.0, 1.0), cap(2.0, 1.0)];
        let demands = [demand(100, &[4.0, 0.0]), demand(100, &[1.0, 2.0])];
        let y = targets(&resources, &demands);
        let rows: Vec<&[f64]> = y.iter().map(Vec::as_slice).collect();
        let before = (&resources[..], &demands[..]);
        let with = |a: &[f64], b: &[f64]| [demand(100, a), demand(100, b)];
        let x = |y: &[Vec<f64>]| -> Vec<f64> { y.iter().map(|row| row.iter().sum()).collect() };
        assert!(
            (x(&y)[0] - 3.0).abs() < 1e-9 && (x(&y)[1] - 3.0).abs() < 1e-9,
            "{y:?}"
        );
        // The first project's cap falls to 3.5: its 3 still fit, and are still its part.
        let after = with(&[3.5, 0.0], &[1.0, 2.0]);
        assert_eq!(
            Divider::default().narrowed(before, (&resources, &after), &rows),
            Ok(Narrowed::Stands)
        );
        // The second's cap on the first type falls to 0: the second type alone cannot
        // carry its 3, so the division is made again.
        let after = with(&[4.0, 0.0], &[0.0, 2.0]);
        assert_eq!(
            Divider::default().narrowed(before, (&resources, &after), &rows),
            Err(Afresh::NotCarried { own: true })
        );
        // With caps of 2 on both types, one fair division gives the second project 2 of
        // the first type and 1 of the second; its cap on the first falls to 1: the same 3
        // split again, 1 and 2.
        let before2 = with(&[4.0, 0.0], &[2.0, 2.0]);
        let y2: [&[f64]; 2] = [&[3.0, 0.0], &[2.0, 1.0]];
        let after = with(&[4.0, 0.0], &[1.0, 2.0]);
        let Ok(Narrowed::Split(again)) =
            Divider::default().narrowed((&resources, &before2), (&resources, &after), &y2)
        else {
            panic!("not split again");
        };
        close(&again, &[&[3.0, 0.0], &[1.0, 2.0]]);
        // A cap grows, a share changes, a type grows, or shrinks below what is handed out.
        let after = with(&[4.0, 1.0], &[1.0, 2.0]);
        assert_eq!(
            Divider::default().narrowed(before, (&resources, &after), &rows),
            Err(Afresh::CapGrew(0, 1))
        );
        let after = [demand(200, &[4.0, 0.0]), demand(100, &[1.0, 2.0])];
        assert_eq!(
            Divider::default().narrowed(before, (&resources, &after), &rows),
            Err(Afresh::Changed)
        );
        assert_eq!(
            Divider::default().narrowed(before, (&[cap(5.0, 1.0), cap(2.0, 1.0)], &demands), &rows),
            Err(Afresh::TypeGrew(0))
        );
        assert_eq!(
            Divider::default().narrowed(before, (&[cap(3.5, 1.0), cap(2.0, 1.0)], &demands), &rows),
            Err(Afresh::NotCarried { own: false })
        );
    }

    proptest::proptest! {
        /// One divider kept across divisions of different sizes (as a ledger keeps it)
        /// gives exactly what a new one gives each time: its network is laid out afresh.
        #[test]
        fn a_kept_divider_divides_as_a_new_one(
            divisions in proptest::collection::vec((
                proptest::collection::vec((0u32..6, 1u32..5), 1..4),
                proptest::collection::vec(
                    (0u32..4, proptest::collection::vec(0u32..8, 3)), 0..7),
            ), 1..6),
        ) {
            // The last division's inputs and targets.
            type Made = (Vec<Capacity>, Vec<Demand>, Vec<Vec<f64>>);
            let mut kept = Divider::default();
            let mut last: Option<Made> = None;
            for (types, projects) in &divisions {
                let resources: Vec<Capacity> = types
                    .iter()
                    .map(|&(n, s)| cap(f64::from(n), f64::from(s)))
                    .collect();
                let demands: Vec<Demand> = projects
                    .iter()
                    .map(|(share, caps)| {
                        let caps: Vec<f64> =
                            caps.iter().take(resources.len()).map(|&c| f64::from(c) / 2.0).collect();
                        demand(share * 50, &caps)
                    })
                    .collect();
                let y = kept.targets(&resources, &demands);
                proptest::prop_assert_eq!(&y, &targets(&resources, &demands));
                if let Some((res0, dem0, y0)) = &last {
                    let rows: Vec<&[f64]> = y0.iter().map(Vec::as_slice).collect();
                    proptest::prop_assert_eq!(
                        kept.narrowed((res0, dem0), (&resources, &demands), &rows),
                        Divider::default().narrowed((res0, dem0), (&resources, &demands), &rows)
                    );
                }
                last = Some((resources, demands, y));
            }
        }
    }

    #[test]
    fn empty_inputs() {
        assert!(targets(&[], &[]).is_empty());
        assert_eq!(
            targets(&[cap(1.0, 1.0)], &[demand(100, &[])]),
            vec![vec![0.0]]
        );
    }
}
