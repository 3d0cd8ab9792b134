//! What one seed decides before anything runs: the servers, the pools and the holds' requests,
//! the steps of the workload, the fault rates and which server dies at which of its calls. A
//! pure function of the seed: the same seed always makes the same plan, whatever Redis does.

use stockd_redis::keys;
use stockd_redis::library::PENDING_TIMEOUT_MS;

/// The test clock's first phase (any fixed instant: Redis never reads its own clock here).
pub const START_MS: u64 = 1_700_000_000_000;
/// A hold that must outlive the run and the quiescing (which moves time by minutes).
pub const LONG_TTL_MS: u64 = 3_600_000;
/// Kills (server replacements) per seed at most.
const KILLS_MAX: usize = 3;
/// The Cluster's partitions in this simulation (the default of a Cluster dataset).
pub const CLUSTER_PARTITIONS: u32 = 16;

/// SplitMix64: small, fast, and the same on every platform and Rust version.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }
}

/// SplitMix64's finaliser: a good 64-bit mix of one word.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of `bytes`, continuing from `hash`.
pub fn hash_bytes(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01B3);
    }
    hash
}

#[derive(Debug, Clone)]
pub struct PoolPlan {
    pub name: String,
    pub partition: u32,
    pub total: u64,
    pub per_user_limit: Option<u64>,
    pub low_stock_threshold: Option<u64>,
    /// Its segment count: above 1 (segmented seeds on a Cluster only), spread over partitions,
    /// its holds in its segments' partitions, every change of the whole pool a pool op.
    pub segments: u32,
}

/// The one request every copy and retry of a hold id sends.
#[derive(Debug, Clone)]
pub struct HoldPlan {
    pub id: String,
    pub user: Option<String>,
    /// (pool index, qty), pools distinct.
    pub items: Vec<(usize, u64)>,
    pub ttl_ms: u64,
    pub confirm: bool,
}

impl HoldPlan {
    /// Hold `h{h}` of `user` over `items`, the rest drawn from `rng` (in this order): a short ttl
    /// (1 to 3 s) `short_ttl_per_mille` times in 1000, else [`LONG_TTL_MS`]; then confirmed at
    /// once 200 times in 1000.
    fn drawn(
        rng: &mut Rng,
        h: usize,
        user: Option<String>,
        items: Vec<(usize, u64)>,
        short_ttl_per_mille: u64,
    ) -> HoldPlan {
        let ttl_ms = if rng.chance(short_ttl_per_mille) {
            rng.range(1_000, 3_000)
        } else {
            LONG_TTL_MS
        };
        HoldPlan {
            id: format!("h{h}"),
            user,
            items,
            ttl_ms,
            confirm: rng.chance(200),
        }
    }

    /// Whether its pools live in several partitions (a cross-partition hold).
    pub fn cross(&self, pools: &[PoolPlan]) -> bool {
        let first = pools[self.items[0].0].partition;
        self.items
            .iter()
            .any(|(pool, _)| pools[*pool].partition != first)
    }
}

/// One step of the workload. Requests are sent by client tasks that run concurrently with the
/// steps after them, until a `Join` (or `Time`) waits for every one.
#[derive(Debug, Clone)]
pub enum Step {
    /// Identical requests, each from its own client, the k-th to slot `slot + k` after
    /// `starts_ms[k]` (real time: a copy that comes a little late); each client retries on 503
    /// on the next slot.
    Reserve {
        hold: usize,
        starts_ms: Vec<u64>,
        slot: usize,
    },
    Confirm {
        hold: usize,
        slot: usize,
    },
    Release {
        hold: usize,
        slot: usize,
    },
    Refund {
        hold: usize,
        restock: bool,
        slot: usize,
    },
    /// A restock with request id `r<step>`.
    Restock {
        pool: usize,
        delta: i64,
        slot: usize,
    },
    /// One client restocks the pool +1, -1, +1, ... `times` times, each with its own request
    /// id: its stock flickers between what it had and one more.
    Flicker {
        pool: usize,
        times: usize,
        slot: usize,
    },
    GetHold {
        hold: usize,
        slot: usize,
    },
    GetPool {
        pool: usize,
        slot: usize,
    },
    /// What once oversold a Cluster: identical copies of a cross-partition hold, some a little
    /// late, while its pool `pool` flickers (`Reserve` and `Flicker` at once).
    Storm {
        hold: usize,
        starts_ms: Vec<u64>,
        pool: usize,
        times: usize,
        slot: usize,
    },
    /// The server in the slot sweeps every partition once (the background sweeper's code).
    Sweep {
        slot: usize,
    },
    /// The server in the slot dies (its calls fail from now on, its unfinished cross-partition
    /// steps stop where they are) and a new server takes the slot.
    Kill {
        slot: usize,
    },
    /// The steps wait this long (real time) before going on, while clients keep running.
    Pause {
        ms: u64,
    },
    /// Every client finishes, then the clock moves.
    Time {
        ms: u64,
    },
    /// Every client finishes.
    Join,
}

/// Per call, in thousandths: how often each fault strikes.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultRates {
    pub delay_per_mille: u64,
    pub delay_ms_max: u64,
    pub fail_per_mille: u64,
    pub drop_reply_per_mille: u64,
    /// Zero on a single Redis: its calls carry no call id, and no real connection resends.
    pub twice_per_mille: u64,
}

/// How server number N (in the order servers are started) dies on its own, if it does: at its
/// `call`-th library call, before sending it or after Redis ran it.
#[derive(Debug, Clone, Copy)]
pub struct Death {
    pub call: u64,
    pub after_running: bool,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    pub partitions: u32,
    pub slots: usize,
    pub pools: Vec<PoolPlan>,
    pub holds: Vec<HoldPlan>,
    pub steps: Vec<Step>,
    pub rates: FaultRates,
    /// How often a server dies on its own at one of its calls (see [`Plan::death`]).
    pub death_per_mille: u64,
    /// How often a server is slow: every call it makes waits (see [`Plan::slow_ms`]).
    pub slow_per_mille: u64,
}

/// A pool name of `partition`: the first `p<k>-<n>` that hashes there.
fn pool_name(k: usize, partition: u32, partitions: u32) -> String {
    (0u32..)
        .map(|n| format!("p{k}-{n}"))
        .find(|name| keys::partition_of(name, partitions) == partition)
        .expect("some name hashes to every partition")
}

/// Of the Cluster seeds that are not storms, how many in 1000 have segmented pools.
const SEGMENTED_PER_MILLE: u64 = 330;

/// What a plan is made of besides its faults.
struct Workload {
    pools: Vec<PoolPlan>,
    holds: Vec<HoldPlan>,
    steps: Vec<Step>,
}

impl Plan {
    pub fn new(seed: u64, partitions: u32) -> Plan {
        let mut rng = Rng::new(seed);
        // On a Cluster, half of the seeds are storms: nothing but the schedule that once
        // oversold (see `storms`); all of them with `STOCKD_SIM_STORMS=1`.
        let storms_only = std::env::var("STOCKD_SIM_STORMS").is_ok_and(|v| v == "1");
        let storms = partitions > 1 && (rng.chance(500) || storms_only);
        let slots = rng.range(if storms { 3 } else { 2 }, 4) as usize;
        let mut workload = if storms {
            Workload::storms(&mut rng, partitions, slots)
        } else {
            Workload::mixed(&mut rng, partitions, slots)
        };
        // On a Cluster, a third of the other seeds make some of their pools segmented (from a
        // stream of their own, so that every other draw of a seed stays what it was).
        let mut shape = Rng::new(mix(seed ^ 0x5E67_3E17));
        if partitions > 1 && !storms && shape.chance(SEGMENTED_PER_MILLE) {
            for pool in &mut workload.pools {
                if shape.chance(600) {
                    pool.segments = shape.range(2, 3) as u32;
                }
            }
            if workload.pools.iter().all(|pool| pool.segments == 1) {
                workload.pools[0].segments = 3;
            }
        }

        // A quarter of the seeds injects no call faults (kills only), so that those are
        // explored alone too.
        let rates = if rng.chance(250) {
            FaultRates::default()
        } else {
            FaultRates {
                delay_per_mille: rng.range(0, 400),
                delay_ms_max: [2, 5, 20, 50][rng.index(4)],
                fail_per_mille: rng.range(0, 30),
                drop_reply_per_mille: rng.range(0, 30),
                twice_per_mille: if partitions > 1 { rng.range(0, 50) } else { 0 },
            }
        };
        let death_per_mille = [0, 150, 250, 400][rng.index(4)];
        let slow_per_mille = [0, 0, 250, 500][rng.index(4)];

        Plan {
            seed,
            partitions,
            slots,
            pools: workload.pools,
            holds: workload.holds,
            steps: workload.steps,
            rates,
            death_per_mille,
            slow_per_mille,
        }
    }

    /// Whether server number `number` is slow, and how: each of its calls waits a time drawn
    /// from this range first (a server behind a bad link, or pausing), so that its steps of
    /// a protocol systematically arrive after other servers'.
    pub fn slow_ms(&self, number: u64) -> Option<(u64, u64)> {
        let mut rng = Rng::new(mix(self.seed ^ mix(number.wrapping_add(0x510E))));
        rng.chance(self.slow_per_mille).then(|| {
            let low = rng.range(2, 20);
            (low, low + rng.range(5, 25))
        })
    }

    /// Whether and how server number `number` (in the order servers start) dies on its own:
    /// a function of the seed and the number alone, however many servers started before.
    pub fn death(&self, number: u64) -> Option<Death> {
        let mut rng = Rng::new(mix(self.seed ^ mix(number.wrapping_add(0xDEAD))));
        rng.chance(self.death_per_mille).then(|| Death {
            call: rng.range(1, 150),
            after_running: rng.chance(500),
        })
    }
}

impl Workload {
    /// Everything at once: single- and cross-partition holds, every kind of step.
    fn mixed(rng: &mut Rng, partitions: u32, slots: usize) -> Workload {
        // Pools: on a Cluster, 2 or 3 partitions with 1 or 2 pools each.
        let mut pools = Vec::new();
        let groups: Vec<u32> = if partitions == 1 {
            vec![0]
        } else {
            let mut chosen: Vec<u32> = Vec::new();
            let wanted = rng.range(2, 3) as usize;
            while chosen.len() < wanted {
                let partition = rng.below(u64::from(partitions)) as u32;
                if !chosen.contains(&partition) {
                    chosen.push(partition);
                }
            }
            chosen
        };
        for &partition in &groups {
            let count = if partitions == 1 {
                rng.range(2, 4)
            } else {
                rng.range(1, 2)
            };
            for _ in 0..count {
                let k = pools.len();
                pools.push(PoolPlan {
                    name: pool_name(k, partition, partitions),
                    partition,
                    total: rng.range(0, 3),
                    per_user_limit: rng.chance(200).then(|| rng.range(1, 3)),
                    low_stock_threshold: rng.chance(300).then(|| rng.range(0, 2)),
                    segments: 1,
                });
            }
        }

        // Holds: a fixed request per hold id; on a Cluster most span partitions.
        let hold_count = rng.range(4, 10) as usize;
        let mut holds = Vec::with_capacity(hold_count);
        for h in 0..hold_count {
            let cross = groups.len() > 1 && rng.chance(650);
            let mut items: Vec<(usize, u64)> = Vec::new();
            if cross {
                // One or two pools of each of two or three partitions, in a shuffled order.
                let mut partitions_used = groups.clone();
                while partitions_used.len() > 2 && rng.chance(400) {
                    let drop = rng.index(partitions_used.len());
                    partitions_used.remove(drop);
                }
                for partition in partitions_used {
                    let here: Vec<usize> = (0..pools.len())
                        .filter(|&p| pools[p].partition == partition)
                        .collect();
                    let take = 1 + rng.index(here.len());
                    for &pool in here.iter().take(take) {
                        items.push((pool, 1 + u64::from(rng.chance(150))));
                    }
                }
                for i in (1..items.len()).rev() {
                    let j = rng.index(i + 1);
                    items.swap(i, j);
                }
            } else {
                let partition = groups[rng.index(groups.len())];
                let here: Vec<usize> = (0..pools.len())
                    .filter(|&p| pools[p].partition == partition)
                    .collect();
                let first = rng.index(here.len());
                items.push((here[first], 1 + u64::from(rng.chance(150))));
                if here.len() > 1 && rng.chance(300) {
                    let second = here[(first + 1) % here.len()];
                    items.push((second, 1));
                }
            }
            let limited = items
                .iter()
                .any(|(pool, _)| pools[*pool].per_user_limit.is_some());
            let user = (limited || rng.chance(500)).then(|| format!("u{}", rng.range(1, 2)));
            holds.push(HoldPlan::drawn(rng, h, user, items, 500));
        }

        // Pools that cross-partition holds take from: restocks flicker them most.
        let cross_pools: Vec<usize> = (0..pools.len())
            .filter(|&p| {
                holds
                    .iter()
                    .any(|h| h.cross(&pools) && h.items.iter().any(|(q, _)| *q == p))
            })
            .collect();

        let cross_holds: Vec<usize> = (0..holds.len())
            .filter(|&h| holds[h].cross(&pools))
            .collect();
        let step_count = rng.range(25, 70) as usize;
        let mut steps = Vec::with_capacity(step_count);
        let mut kills = 0;
        for _ in 0..step_count {
            let slot = rng.index(slots);
            let hold = rng.index(holds.len());
            let pool = rng.index(pools.len());
            let step = match rng.below(100) {
                0..=29 => {
                    let copies = match rng.below(20) {
                        0..=8 => 1,
                        9..=15 => 2,
                        _ => 3,
                    };
                    let staggered = rng.chance(500);
                    Step::Reserve {
                        hold,
                        starts_ms: (0..copies)
                            .map(|_| if staggered { rng.range(0, 20) } else { 0 })
                            .collect(),
                        slot,
                    }
                }
                30..=36 => Step::Confirm { hold, slot },
                37..=39 if !cross_holds.is_empty() => {
                    let hold = cross_holds[rng.index(cross_holds.len())];
                    let items = &holds[hold].items;
                    Step::Storm {
                        hold,
                        starts_ms: (0..rng.range(2, 4)).map(|_| rng.range(0, 40)).collect(),
                        pool: items[rng.index(items.len())].0,
                        times: rng.range(4, 10) as usize,
                        slot,
                    }
                }
                37..=39 => Step::Confirm { hold, slot },
                40..=45 => Step::Release { hold, slot },
                46..=49 => Step::Refund {
                    hold,
                    restock: rng.chance(700),
                    slot,
                },
                50..=55 => Step::Restock {
                    pool,
                    delta: [1, 1, -1, 2][rng.index(4)],
                    slot,
                },
                56..=61 => Step::Flicker {
                    pool: if cross_pools.is_empty() || rng.chance(250) {
                        pool
                    } else {
                        cross_pools[rng.index(cross_pools.len())]
                    },
                    times: rng.range(2, 6) as usize,
                    slot,
                },
                62..=66 => Step::GetHold { hold, slot },
                67..=69 => Step::GetPool { pool, slot },
                70..=73 => Step::Sweep { slot },
                roll => MIXED_TAIL.step(rng, roll, &mut kills, slot),
            };
            steps.push(step);
        }

        Workload {
            pools,
            holds,
            steps,
        }
    }

    /// Storms: cross-partition holds over the same few pools, one scarce, each reserved by three
    /// to eight identical copies (some a little late) while the scarce pool's stock flickers,
    /// with releases that free the other pools again, and kills, sweeps and time as usual.
    fn storms(rng: &mut Rng, partitions: u32, slots: usize) -> Workload {
        let mut chosen: Vec<u32> = Vec::new();
        let wanted = if rng.chance(300) { 3 } else { 2 };
        while chosen.len() < wanted {
            let partition = rng.below(u64::from(partitions)) as u32;
            if !chosen.contains(&partition) {
                chosen.push(partition);
            }
        }
        let pools: Vec<PoolPlan> = chosen
            .iter()
            .enumerate()
            .map(|(k, &partition)| PoolPlan {
                name: pool_name(k, partition, partitions),
                partition,
                // The first pool has stock; the others are scarce.
                total: if k == 0 {
                    rng.range(1, 2)
                } else {
                    rng.range(0, 1)
                },
                per_user_limit: None,
                low_stock_threshold: rng.chance(300).then(|| rng.range(0, 1)),
                segments: 1,
            })
            .collect();
        let hold_count = rng.range(5, 10) as usize;
        let holds: Vec<HoldPlan> = (0..hold_count)
            .map(|h| {
                let mut items: Vec<(usize, u64)> = (0..pools.len())
                    .filter(|&p| p < 2 || rng.chance(500))
                    .map(|p| (p, 1))
                    .collect();
                for i in (1..items.len()).rev() {
                    let j = rng.index(i + 1);
                    items.swap(i, j);
                }
                let user = rng.chance(300).then(|| "u1".to_string());
                HoldPlan::drawn(rng, h, user, items, 200)
            })
            .collect();
        let mut steps = Vec::new();
        let mut kills = 0;
        for hold in 0..hold_count {
            let slot = rng.index(slots);
            steps.push(Step::Storm {
                hold,
                starts_ms: (0..rng.range(3, 8)).map(|_| rng.range(0, 30)).collect(),
                pool: 1 + rng.index(pools.len() - 1),
                times: rng.range(4, 10) as usize,
                slot,
            });
            for _ in 0..rng.range(0, 3) {
                let slot = rng.index(slots);
                let earlier = rng.index(hold + 1);
                steps.push(match rng.below(100) {
                    0..=34 => Step::Release {
                        hold: earlier,
                        slot,
                    },
                    35..=44 => Step::Confirm {
                        hold: earlier,
                        slot,
                    },
                    45..=49 => Step::Refund {
                        hold: earlier,
                        restock: rng.chance(700),
                        slot,
                    },
                    50..=54 => Step::GetHold {
                        hold: earlier,
                        slot,
                    },
                    55..=64 => Step::Sweep { slot },
                    roll => STORMS_TAIL.step(rng, roll, &mut kills, slot),
                });
            }
        }
        Workload {
            pools,
            holds,
            steps,
        }
    }
}

/// The end of a workload's table of steps, for a roll (below 100) that no earlier row took: from
/// `kill_from`, a kill while fewer than [`KILLS_MAX`] were drawn (rolls to `kill_to`), else a
/// pause of 0 to `pause_ms_max` ms (rolls to `pause_to`); a join (rolls to `join_to`); a clock
/// step ([`time_step`] with `time_per_mille`) above.
struct Tail {
    kill_from: u64,
    kill_to: u64,
    pause_to: u64,
    pause_ms_max: u64,
    join_to: u64,
    time_per_mille: u64,
}

const MIXED_TAIL: Tail = Tail {
    kill_from: 74,
    kill_to: 76,
    pause_to: 84,
    pause_ms_max: 4,
    join_to: 90,
    time_per_mille: 200,
};

const STORMS_TAIL: Tail = Tail {
    kill_from: 65,
    kill_to: 69,
    pause_to: 79,
    pause_ms_max: 10,
    join_to: 91,
    time_per_mille: 300,
};

impl Tail {
    fn step(&self, rng: &mut Rng, roll: u64, kills: &mut usize, slot: usize) -> Step {
        assert!(
            roll >= self.kill_from,
            "roll {roll} belongs to an earlier row"
        );
        if roll <= self.kill_to && *kills < KILLS_MAX {
            *kills += 1;
            Step::Kill { slot }
        } else if roll <= self.pause_to {
            Step::Pause {
                ms: rng.range(0, self.pause_ms_max),
            }
        } else if roll <= self.join_to {
            Step::Join
        } else {
            time_step(rng, self.time_per_mille)
        }
    }
}

/// The clock moves 100 ms to 1.5 s, or (`per_mille` times in 1000) past the pending timeout of
/// the cross-partition protocol, so that sweepers roll back unfinished reserves while copies and
/// retries may still be at work.
fn time_step(rng: &mut Rng, per_mille: u64) -> Step {
    Step::Time {
        ms: if rng.chance(per_mille) {
            rng.range(PENDING_TIMEOUT_MS, PENDING_TIMEOUT_MS + 2_500)
        } else {
            rng.range(100, 1_500)
        },
    }
}
