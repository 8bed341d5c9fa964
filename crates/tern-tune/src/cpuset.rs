//! Sets of CPU (or NUMA node) numbers in the kernel's list format, `0-3,8,10-11`: the format of
//! `/sys/devices/system/node/node0/cpulist`, `/proc/irq/N/smp_affinity_list`, `Cpus_allowed_list`,
//! `taskset -c` and `tern serve --pin`.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

/// An ordered set of CPU numbers (also used for NUMA node numbers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(BTreeSet<usize>);

/// Why a cpulist did not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CpuListError {
    #[error("bad cpulist {list:?}: {part:?} is not a number or a range like 0-3")]
    BadPart { list: String, part: String },
    #[error("bad cpulist {list:?}: range {part:?} runs backwards")]
    Backwards { list: String, part: String },
    #[error("bad cpulist {list:?}: stride in {part:?} must be at least 1")]
    BadStride { list: String, part: String },
}

impl CpuSet {
    pub fn new() -> CpuSet {
        CpuSet(BTreeSet::new())
    }

    /// Parses `0-3,8,10-11`, also the kernel's strided form `0-15:2` (every 2nd CPU). An empty
    /// string (or only whitespace, as `/sys/devices/system/cpu/isolated` holds when nothing is
    /// isolated) is the empty set.
    pub fn parse(list: &str) -> Result<CpuSet, CpuListError> {
        let mut set = BTreeSet::new();
        let trimmed = list.trim();
        if trimmed.is_empty() {
            return Ok(CpuSet(set));
        }
        let bad = |part: &str| CpuListError::BadPart {
            list: list.to_string(),
            part: part.to_string(),
        };
        for part in trimmed.split(',') {
            let part = part.trim();
            let (range, stride) = match part.split_once(':') {
                Some((range, stride)) => {
                    let stride: usize = stride.parse().map_err(|_| bad(part))?;
                    if stride == 0 {
                        return Err(CpuListError::BadStride {
                            list: list.to_string(),
                            part: part.to_string(),
                        });
                    }
                    (range, stride)
                }
                None => (part, 1),
            };
            let (first, last) = match range.split_once('-') {
                Some((a, b)) => (
                    a.parse::<usize>().map_err(|_| bad(part))?,
                    b.parse::<usize>().map_err(|_| bad(part))?,
                ),
                None => {
                    let n = range.parse::<usize>().map_err(|_| bad(part))?;
                    (n, n)
                }
            };
            if last < first {
                return Err(CpuListError::Backwards {
                    list: list.to_string(),
                    part: part.to_string(),
                });
            }
            set.extend((first..=last).step_by(stride));
        }
        Ok(CpuSet(set))
    }

    pub fn insert(&mut self, cpu: usize) -> bool {
        self.0.insert(cpu)
    }

    pub fn contains(&self, cpu: usize) -> bool {
        self.0.contains(&cpu)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }

    pub fn first(&self) -> Option<usize> {
        self.0.first().copied()
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&other.0).copied().collect())
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        self.0.is_disjoint(&other.0)
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> CpuSet {
        CpuSet(iter.into_iter().collect())
    }
}

/// The kernel's compact form: runs of consecutive CPUs as `a-b`, others alone, comma-separated;
/// the empty set prints as an empty string.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut cpus = self.0.iter().copied().peekable();
        let mut first_run = true;
        while let Some(start) = cpus.next() {
            let mut end = start;
            while cpus.peek() == Some(&(end + 1)) {
                end = cpus.next().expect("peeked");
            }
            if !first_run {
                f.write_str(",")?;
            }
            first_run = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for CpuSet {
    type Err = CpuListError;

    fn from_str(s: &str) -> Result<CpuSet, CpuListError> {
        CpuSet::parse(s)
    }
}

/// JSON shows the list form people type, `"0-3,8"`, not an array of numbers.
impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(list: &str) -> Vec<usize> {
        CpuSet::parse(list).unwrap().iter().collect()
    }

    #[test]
    fn parses_singles_ranges_and_strides() {
        assert_eq!(cpus("0-3,8,10-11"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(cpus("5"), vec![5]);
        assert_eq!(cpus("0-7:2"), vec![0, 2, 4, 6]);
        assert_eq!(cpus(" 1,3\n"), vec![1, 3]);
        assert_eq!(cpus("3,1,1,2"), vec![1, 2, 3]);
        assert!(CpuSet::parse("").unwrap().is_empty());
        assert!(CpuSet::parse("\n").unwrap().is_empty());
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(
            CpuSet::parse("a"),
            Err(CpuListError::BadPart { .. })
        ));
        assert!(matches!(
            CpuSet::parse("1,,2"),
            Err(CpuListError::BadPart { .. })
        ));
        assert!(matches!(
            CpuSet::parse("-1"),
            Err(CpuListError::BadPart { .. })
        ));
        assert!(matches!(
            CpuSet::parse("4-2"),
            Err(CpuListError::Backwards { .. })
        ));
        assert!(matches!(
            CpuSet::parse("0-4:0"),
            Err(CpuListError::BadStride { .. })
        ));
        let message = CpuSet::parse("1-x").unwrap_err().to_string();
        assert!(message.contains("\"1-x\""), "{message}");
    }

    #[test]
    fn formats_runs_compactly() {
        let set: CpuSet = [0, 1, 2, 3, 8, 10, 11].into_iter().collect();
        assert_eq!(set.to_string(), "0-3,8,10-11");
        assert_eq!(CpuSet::new().to_string(), "");
        assert_eq!(CpuSet::parse("7").unwrap().to_string(), "7");
        assert_eq!(CpuSet::parse("0-7:2").unwrap().to_string(), "0,2,4,6");
    }

    #[test]
    fn format_and_parse_round_trip() {
        for list in ["0", "0-1", "0-5,12-17", "1,3,5-9,30", "0-63"] {
            assert_eq!(CpuSet::parse(list).unwrap().to_string(), list);
        }
    }

    #[test]
    fn serializes_as_the_list_string() {
        let set = CpuSet::parse("0-2,4").unwrap();
        assert_eq!(serde_json::to_string(&set).unwrap(), "\"0-2,4\"");
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse("0-5").unwrap();
        let b = CpuSet::parse("4-7").unwrap();
        assert_eq!(a.union(&b).to_string(), "0-7");
        assert_eq!(a.intersection(&b).to_string(), "4-5");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert!(CpuSet::parse("1-2").unwrap().is_subset(&a));
        assert!(a.is_disjoint(&CpuSet::parse("6-9").unwrap()));
    }
}
