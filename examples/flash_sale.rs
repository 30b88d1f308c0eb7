//! Run first: `cargo run --release --example flash_sale` (needs
//! `redis-server` on PATH).
//!
//! The story behind many a first distributed lock: three instances of a shop service sell one
//! hot item, each deducting its stock under a lock. This example starts three local lock
//! masters and a fourth `redis-server` as the shop's database (the "store"), then runs the sale
//! four times, each time with three separate worker processes (this binary, run again as
//! `flash_sale worker ...`):
//!
//! 1. **no lease, TTL too short**: the lock's TTL (20 ms) is shorter than most deductions (read the
//!    stock, 5 to 50 ms of work, write it back): the lock expires mid-deduction, another instance
//!    reads the same stock, and the item is **oversold** (the example prints by how much);
//! 2. **lease**: the same short TTL, renewed by a lease while the deduction runs
//!    ([`Redlock::run_exclusive`]): nothing oversold;
//! 3. **fencing**: the too-short TTL again, but every store access carries the lock's fencing
//!    token and the store rejects a token older than the newest it has seen: every stale
//!    deduction is rejected, nothing oversold;
//! 4. **notified hand-offs against polling**: a correct sale (lease) with short deductions,
//!    each instance taking the next order (10 ms) between two, once with notified hand-offs (the
//!    default) and once polling with the default retry delay: how much sooner the sale
//!    finishes.

use std::error::Error;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quorumlock::{LeaseOptions, Redlock};
use quorumlock_testkit::{RedisCluster, RedisMaster};

/// Shop instances (worker processes) per sale.
const INSTANCES: usize = 3;
/// The lock's TTL in the scenarios where it is too short for the work.
const SHORT_TTL: Duration = Duration::from_millis(20);
/// One deduction's work (payment, inventory service...) in those scenarios: uniform in
/// `[SLOW_WORK_MIN, SLOW_WORK_MAX)`, mostly longer than the TTL. (Were it always longer,
/// fencing would reject every deduction and the sale would never end: fencing makes a sale
/// safe, not live.)
const SLOW_WORK_MIN: Duration = Duration::from_millis(5);
const SLOW_WORK_MAX: Duration = Duration::from_millis(50);

/// A random duration of slow work.
fn slow_work() -> Duration {
    use rand::RngExt;
    let micros = rand::rng()
        .random_range(SLOW_WORK_MIN.as_micros() as u64..SLOW_WORK_MAX.as_micros() as u64);
    Duration::from_micros(micros)
}
/// One deduction's work in the hand-off race.
const QUICK_WORK: Duration = Duration::from_millis(5);
/// In the hand-off race, the time an instance spends outside the lock between two orders
/// (taking the next customer's request): the others wait for the lock meanwhile, and how soon
/// they notice it is free is what the race measures.
const NEXT_ORDER: Duration = Duration::from_millis(10);

/// Reads the stock, registering the reader's fencing token: a token older than the newest the
/// store has seen is rejected (-1), so a deduction that started under an expired lock cannot
/// write after a newer holder read.
const FENCED_READ: &str = r"local newest = tonumber(redis.call('get', KEYS[2]) or '0')
if tonumber(ARGV[1]) < newest then return -1 end
redis.call('set', KEYS[2], ARGV[1])
return tonumber(redis.call('get', KEYS[1]) or '0')";

/// Writes the stock and records the order, under the same token check.
const FENCED_WRITE: &str = r"local newest = tonumber(redis.call('get', KEYS[2]) or '0')
if tonumber(ARGV[1]) < newest then return -1 end
redis.call('set', KEYS[2], ARGV[1])
redis.call('set', KEYS[1], ARGV[2])
return redis.call('incr', KEYS[3])";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `lock` with a TTL shorter than the work, no renewal.
    Short,
    /// `run_exclusive`: a lease renews the short TTL.
    Lease,
    /// `lock` with the short TTL, fenced store accesses.
    Fenced,
    /// A lease and quick work, notified hand-offs on or off.
    Race { notified: bool },
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::Short => "short",
            Mode::Lease => "lease",
            Mode::Fenced => "fenced",
            Mode::Race { notified: true } => "notified",
            Mode::Race { notified: false } => "polling",
        }
    }

    fn parse(arg: &str) -> Option<Self> {
        Some(match arg {
            "short" => Mode::Short,
            "lease" => Mode::Lease,
            "fenced" => Mode::Fenced,
            "notified" => Mode::Race { notified: true },
            "polling" => Mode::Race { notified: false },
            _ => return None,
        })
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if args.get(1).map(String::as_str) == Some("worker") {
        // flash_sale worker MODE STORE_URL LOCK_URL...
        let mode = args
            .get(2)
            .and_then(|m| Mode::parse(m))
            .ok_or("worker: expected a mode")?;
        let store = args.get(3).ok_or("worker: expected the store's url")?;
        return runtime.block_on(worker(mode, store, &args[4..]));
    }
    runtime.block_on(sale())
}

/// The parent: starts the masters and the store, runs each scenario with three workers.
async fn sale() -> Result<(), Box<dyn Error>> {
    let cluster = RedisCluster::start(3)?;
    let store = RedisMaster::start(Default::default())?;
    println!(
        "3 lock masters ({}), a store ({}), {INSTANCES} shop instances per sale\n",
        cluster.urls().join(", "),
        store.url()
    );
    let run = |mode: Mode, stock: u64| -> Result<Outcome, Box<dyn Error>> {
        reset(&store, stock)?;
        let started = Instant::now();
        let exe = std::env::current_exe()?;
        let children: Vec<_> = (0..INSTANCES)
            .map(|_| {
                Command::new(&exe)
                    .arg("worker")
                    .arg(mode.arg())
                    .arg(store.url())
                    .args(cluster.urls())
                    .stdout(Stdio::piped())
                    .spawn()
            })
            .collect::<Result<_, _>>()?;
        let mut rejected = 0;
        for child in children {
            let output = child.wait_with_output()?;
            if !output.status.success() {
                return Err(format!("a worker failed: {}", output.status).into());
            }
            // Each worker prints how many of its deductions the store rejected.
            rejected += String::from_utf8_lossy(&output.stdout)
                .trim()
                .parse::<u64>()
                .unwrap_or(0);
        }
        let orders = number(&store, "orders")?;
        Ok(Outcome {
            stock,
            orders,
            rejected,
            took: started.elapsed(),
        })
    };

    let short = run(Mode::Short, 40)?;
    println!(
        "1. no lease, TTL {SHORT_TTL:?}, work {SLOW_WORK_MIN:?}-{SLOW_WORK_MAX:?}: {} orders for {} items: oversold by {}",
        short.orders,
        short.stock,
        short.orders.saturating_sub(short.stock)
    );
    let lease = run(Mode::Lease, 40)?;
    println!(
        "2. a lease renewing the {SHORT_TTL:?} TTL, same work: {} orders for {} items: oversold by {}",
        lease.orders,
        lease.stock,
        lease.orders.saturating_sub(lease.stock)
    );
    let fenced = run(Mode::Fenced, 40)?;
    println!(
        "3. fencing, no lease, TTL {SHORT_TTL:?}, same work: {} orders for {} items: oversold by {}; {} stale deductions rejected by the store",
        fenced.orders,
        fenced.stock,
        fenced.orders.saturating_sub(fenced.stock),
        fenced.rejected
    );
    let notified = run(Mode::Race { notified: true }, 100)?;
    let polling = run(Mode::Race { notified: false }, 100)?;
    println!(
        "4. {} items, {QUICK_WORK:?} per deduction and {NEXT_ORDER:?} between an instance's orders, lease: notified hand-offs sold out in {:.2} s, polling (retry delay < 200 ms) in {:.2} s: {:.1}x sooner",
        notified.stock,
        notified.took.as_secs_f64(),
        polling.took.as_secs_f64(),
        polling.took.as_secs_f64() / notified.took.as_secs_f64().max(1e-9)
    );
    if lease.orders > lease.stock || fenced.orders > fenced.stock {
        return Err("a lease or fencing oversold: that is a bug".into());
    }
    Ok(())
}

struct Outcome {
    stock: u64,
    orders: u64,
    rejected: u64,
    took: Duration,
}

fn reset(store: &RedisMaster, stock: u64) -> Result<(), Box<dyn Error>> {
    store.command(&["FLUSHALL"])?;
    store.command(&["SET", "stock", &stock.to_string()])?;
    store.command(&["SET", "orders", "0"])?;
    Ok(())
}

fn number(store: &RedisMaster, key: &str) -> Result<u64, Box<dyn Error>> {
    Ok(store.command(&["GET", key])?.trim().parse()?)
}

/// One shop instance: sells until the stock is gone; prints how many of its deductions the
/// store rejected.
async fn worker(mode: Mode, store: &str, masters: &[String]) -> Result<(), Box<dyn Error>> {
    let notified = !matches!(mode, Mode::Race { notified: false });
    let locks = Redlock::builder()
        .nodes(masters.iter().cloned())
        .retry_count(u32::MAX)
        .notified_handoffs(notified)
        .build()?;
    let locks = if mode == Mode::Fenced {
        locks.fenced()
    } else {
        locks
    };
    let client = redis::Client::open(store)?;
    let mut db = client.get_multiplexed_async_connection().await?;
    let read = redis::Script::new(FENCED_READ);
    let write = redis::Script::new(FENCED_WRITE);
    let mut rejected = 0u64;
    loop {
        let sold_out = match mode {
            Mode::Short => {
                let guard = locks.lock("item:hot", SHORT_TTL).await?;
                let sold_out = deduct(&mut db, slow_work()).await?;
                // Usually expired by now: the release finds nothing of ours, as expected.
                let _ = guard.release().await;
                sold_out
            }
            Mode::Fenced => {
                let guard = locks.lock("item:hot", SHORT_TTL).await?;
                let token = guard.fence().ok_or("a fenced lock has a token")?;
                let stock: i64 = read
                    .key("stock")
                    .key("fence")
                    .arg(token)
                    .invoke_async(&mut db)
                    .await?;
                let sold_out = if stock < 0 {
                    rejected += 1;
                    false
                } else if stock == 0 {
                    true
                } else {
                    tokio::time::sleep(slow_work()).await;
                    let written: i64 = write
                        .key("stock")
                        .key("fence")
                        .key("orders")
                        .arg(token)
                        .arg(stock - 1)
                        .invoke_async(&mut db)
                        .await?;
                    if written < 0 {
                        rejected += 1;
                    }
                    false
                };
                let _ = guard.release().await;
                sold_out
            }
            Mode::Lease | Mode::Race { .. } => {
                let work = if mode == Mode::Lease {
                    slow_work()
                } else {
                    QUICK_WORK
                };
                let ttl = if mode == Mode::Lease {
                    SHORT_TTL
                } else {
                    Duration::from_secs(2)
                };
                let opts = LeaseOptions::new().ttl(ttl);
                let mut conn = db.clone();
                let outcome = locks
                    .run_exclusive("item:hot", opts, |_lease| async move {
                        deduct(&mut conn, work).await
                    })
                    .await;
                match outcome {
                    Ok(deducted) => deducted?,
                    // The lease was lost (a renewal came too late on a loaded machine): the
                    // deduction was cancelled before it wrote anything, so try again.
                    Err(e) if e.is_not_held() => false,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        if sold_out {
            break;
        }
        if matches!(mode, Mode::Race { .. }) {
            tokio::time::sleep(NEXT_ORDER).await;
        }
    }
    println!("{rejected}");
    Ok(())
}

/// One deduction without fencing: read the stock, work, write it back less one and record the
/// order. Returns whether the stock was gone.
async fn deduct(
    db: &mut redis::aio::MultiplexedConnection,
    work: Duration,
) -> Result<bool, redis::RedisError> {
    let stock: i64 = redis::cmd("GET").arg("stock").query_async(db).await?;
    if stock <= 0 {
        return Ok(true);
    }
    tokio::time::sleep(work).await;
    // The write and the order together (MULTI/EXEC): a cancelled deduction leaves neither.
    let ((), _orders): ((), i64) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("stock")
        .arg(stock - 1)
        .cmd("INCR")
        .arg("orders")
        .query_async(db)
        .await?;
    Ok(false)
}
