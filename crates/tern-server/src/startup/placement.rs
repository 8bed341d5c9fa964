//! Where the threads and the heap go: `--pin` and `--numa-node`, laid out by tern-tune's rules
//! (the same ones `tern tune plan` prints), so a pinned, NUMA-local server needs no taskset or
//! numactl around it.

use anyhow::Context;
use tern_tune::pin::{self, PinLayout};
use tern_tune::CpuSet;

use crate::config::Settings;

/// The layout chosen at start, before any thread or heap exists.
pub struct Placement {
    /// `--pin`: the CPU of each worker and, with `auto`, one for background threads.
    pub layout: Option<PinLayout>,
    /// `--numa-node`: the node, and its CPUs for threads that `--pin` does not place.
    pub node: Option<(usize, CpuSet)>,
    /// The CPUs the main thread was allowed at start, to hand back once the workers are placed.
    original: CpuSet,
}

impl Placement {
    /// Checks `--pin` and `--numa-node` against this machine and chooses the CPUs.
    pub fn plan(settings: &Settings) -> anyhow::Result<Placement> {
        let node = match settings.numa_node {
            Some(node) => Some((node, pin::node_cpus(node).context("--numa-node")?)),
            None => None,
        };
        let layout = match &settings.pin {
            // The error names the --pin value itself.
            Some(spec) => Some(pin::plan_pinning(
                spec,
                settings.threads,
                settings.numa_node,
            )?),
            None => None,
        };
        Ok(Placement {
            layout,
            node,
            original: pin::current_thread_affinity()?,
        })
    }

    /// Binds all memory touched from now on to the `--numa-node` node. Called on the main thread
    /// before the heap is mapped: every thread started later inherits the policy.
    pub fn bind_memory(&self) -> anyhow::Result<()> {
        if let Some((node, _)) = self.node {
            pin::bind_memory_to_node(node).context("--numa-node")?;
        }
        Ok(())
    }

    /// Confines the calling (main) thread to where worker `id` belongs, so the worker thread it
    /// spawns next inherits that affinity. Doing it here rather than inside the worker makes a
    /// refusal an error at start, not a log line from a thread.
    pub fn enter_worker(&self, id: usize) -> anyhow::Result<()> {
        if let Some(layout) = &self.layout {
            pin::pin_current_thread(layout.workers[id])
                .with_context(|| format!("--pin: worker {id}"))?;
        } else if let Some((_, cpus)) = &self.node {
            pin::set_current_thread_affinity(cpus).context("--numa-node")?;
        }
        Ok(())
    }

    /// After the workers: the main thread (and the background threads it starts) go to the
    /// background CPU `auto` chose, else to the node's CPUs, else back to where they were.
    pub fn enter_background(&self) -> anyhow::Result<()> {
        let cpus = match (&self.layout, &self.node) {
            (
                Some(PinLayout {
                    background: Some(cpu),
                    ..
                }),
                _,
            ) => [*cpu].into_iter().collect(),
            (_, Some((_, cpus))) => cpus.clone(),
            _ => self.original.clone(),
        };
        pin::set_current_thread_affinity(&cpus).context("placing the background threads")?;
        Ok(())
    }

    /// For `stats settings`: each worker's CPU in worker order (`0,1`), or `unpinned`.
    pub fn worker_cpus(&self) -> String {
        match &self.layout {
            Some(layout) => layout
                .workers
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            None => "unpinned".into(),
        }
    }
}
