//! What this process uses of the machine, read from Linux's `/proc`: resident memory and
//! CPU time, for the benchmark programs' reports. Elsewhere every reader returns `None`.

/// Peak resident set size of this process in bytes (Linux `VmHWM`), if known.
pub fn peak_rss() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// Current resident set size of this process in bytes (Linux `VmRSS`), if known.
pub fn current_rss() -> Option<u64> {
    status_bytes("VmRSS:")
}

/// A `kB` field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// CPU time spent so far, split into user and system (kernel) time, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTime {
    /// Time running this program's own code.
    pub user: f64,
    /// Time in the kernel on its behalf (page faults, system calls).
    pub system: f64,
}

impl CpuTime {
    /// The time spent between `earlier` and `self`.
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user - earlier.user,
            system: self.system - earlier.system,
        }
    }
}

/// CPU time of the calling thread so far (`/proc/thread-self/stat`), if known: a party's
/// own work when each party runs on a thread of its own.
pub fn thread_cpu() -> Option<CpuTime> {
    stat_cpu("/proc/thread-self/stat")
}

/// CPU time of this whole process so far, every thread's (`/proc/self/stat`), if known.
pub fn process_cpu() -> Option<CpuTime> {
    stat_cpu("/proc/self/stat")
}

/// Clock ticks per second of `/proc`'s times: Linux's `USER_HZ`, 100 on x86-64 and
/// AArch64 (the machines this project builds for; a few old architectures used 1024).
const TICKS_PER_SECOND: f64 = 100.0;

/// The `utime` and `stime` fields (14 and 15) of a `stat` file.
fn stat_cpu(path: &str) -> Option<CpuTime> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(CpuTime {
        user: user as f64 / TICKS_PER_SECOND,
        system: system as f64 / TICKS_PER_SECOND,
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work_and_is_split() {
        let before = thread_cpu().expect("Linux /proc");
        // About 0.1 s of arithmetic at least: ticks are 10 ms.
        let mut x = 1u64;
        let t = std::time::Instant::now();
        while t.elapsed().as_secs_f64() < 0.3 {
            for _ in 0..10_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let spent = thread_cpu().expect("Linux /proc").since(before);
        assert!(spent.user + spent.system >= 0.1, "{spent:?}");
        assert!(spent.user >= 0.0 && spent.system >= 0.0);
        let whole = process_cpu().expect("Linux /proc");
        assert!(whole.user + whole.system >= spent.user + spent.system);
    }
}
