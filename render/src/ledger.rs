//! The memory ledger: every GPU buffer and texture the project creates, by category and owner.
//!
//! Allocation goes through [`crate::GpuContext`], which registers the bytes here and hands
//! back a resource that carries a [`LedgerEntry`]; dropping the resource drops the entry,
//! which unregisters the bytes. So the ledger cannot drift from what is alive: a buffer that
//! is still referenced somewhere is still in the ledger, under the owner that made it.
//!
//! A [`LedgerSnapshot`] is cheap (a lock and a walk over live allocations, of which there are
//! dozens, not millions) and plain data, so it can travel in events to the UI.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;

/// What a GPU allocation is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Splat parameters: means, scales, rotations, opacities, SH.
    SplatParameters,
    /// Gradients of the parameters.
    Gradients,
    /// Optimizer state (Adam moments).
    OptimizerState,
    /// Densification statistics (gradient norms, visibility, radii).
    DensificationStats,
    /// Per-frame rasterizer buffers (projected splats, keys, tile ranges, images).
    RasterizerScratch,
    /// Training images uploaded to the GPU.
    DatasetImages,
    /// Buffers and textures of the viewer.
    Viewer,
    /// Uniforms, readback staging and anything else.
    Other,
}

impl Category {
    pub const ALL: [Self; 8] = [
        Self::SplatParameters,
        Self::Gradients,
        Self::OptimizerState,
        Self::DensificationStats,
        Self::RasterizerScratch,
        Self::DatasetImages,
        Self::Viewer,
        Self::Other,
    ];

    /// Human-readable name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::SplatParameters => "splat parameters",
            Self::Gradients => "gradients",
            Self::OptimizerState => "optimizer state",
            Self::DensificationStats => "densification statistics",
            Self::RasterizerScratch => "rasterizer scratch",
            Self::DatasetImages => "dataset images",
            Self::Viewer => "viewer",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Who an allocation belongs to. A run's teardown must bring its owner to zero bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    /// A training run, by its id.
    Run(u64),
    /// The interactive viewer.
    Viewer,
    /// Long-lived resources shared by everything (pipelines' uniforms, tests).
    Shared,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Run(id) => write!(f, "run {id}"),
            Self::Viewer => f.write_str("viewer"),
            Self::Shared => f.write_str("shared"),
        }
    }
}

/// One live allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Allocation {
    pub label: String,
    pub category: Category,
    pub owner: Owner,
    pub bytes: u64,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    live: BTreeMap<u64, Allocation>,
    total_bytes: u64,
    peak_bytes: u64,
}

/// The ledger. Shared (behind an `Arc`) by the context and every live entry.
#[derive(Debug, Default)]
pub struct Ledger {
    state: Mutex<State>,
}

impl Ledger {
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a map of plain numbers; a panic elsewhere cannot leave it half-updated
        // in a way that matters more than losing the ledger would.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers an allocation; the returned entry unregisters it when dropped.
    #[must_use]
    pub fn register(self: &Arc<Self>, allocation: Allocation) -> LedgerEntry {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.total_bytes += allocation.bytes;
        state.peak_bytes = state.peak_bytes.max(state.total_bytes);
        state.live.insert(id, allocation);
        LedgerEntry { ledger: Arc::clone(self), id }
    }

    fn unregister(&self, id: u64) {
        let mut state = self.lock();
        if let Some(allocation) = state.live.remove(&id) {
            state.total_bytes -= allocation.bytes;
        }
    }

    /// Bytes alive now.
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.lock().total_bytes
    }

    /// Bytes alive now that belong to `owner`.
    #[must_use]
    pub fn owner_bytes(&self, owner: Owner) -> u64 {
        self.lock().live.values().filter(|a| a.owner == owner).map(|a| a.bytes).sum()
    }

    /// Starts a new peak measurement at the current total.
    pub fn reset_peak(&self) {
        let mut state = self.lock();
        state.peak_bytes = state.total_bytes;
    }

    /// Everything the ledger knows, as plain data.
    #[must_use]
    pub fn snapshot(&self) -> LedgerSnapshot {
        let state = self.lock();
        let mut by_category: BTreeMap<Category, u64> = BTreeMap::new();
        let mut by_owner: BTreeMap<Owner, u64> = BTreeMap::new();
        for a in state.live.values() {
            *by_category.entry(a.category).or_default() += a.bytes;
            *by_owner.entry(a.owner).or_default() += a.bytes;
        }
        LedgerSnapshot {
            total_bytes: state.total_bytes,
            peak_bytes: state.peak_bytes,
            by_category,
            by_owner,
            allocations: state.live.values().cloned().collect(),
        }
    }
}

/// Keeps an allocation registered; unregisters it on drop.
#[derive(Debug)]
pub struct LedgerEntry {
    ledger: Arc<Ledger>,
    id: u64,
}

impl Drop for LedgerEntry {
    fn drop(&mut self) {
        self.ledger.unregister(self.id);
    }
}

/// The ledger at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LedgerSnapshot {
    pub total_bytes: u64,
    /// Highest total since the ledger was made or [`Ledger::reset_peak`] was last called.
    pub peak_bytes: u64,
    pub by_category: BTreeMap<Category, u64>,
    pub by_owner: BTreeMap<Owner, u64>,
    /// Every live allocation, for diagnosing what a run left behind.
    pub allocations: Vec<Allocation>,
}

impl LedgerSnapshot {
    #[must_use]
    pub fn category_bytes(&self, category: Category) -> u64 {
        self.by_category.get(&category).copied().unwrap_or(0)
    }

    #[must_use]
    pub fn owner_bytes(&self, owner: Owner) -> u64 {
        self.by_owner.get(&owner).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(category: Category, owner: Owner, bytes: u64) -> Allocation {
        Allocation { label: "test".into(), category, owner, bytes }
    }

    #[test]
    fn entries_unregister_on_drop_and_peak_is_kept() {
        let ledger = Ledger::new();
        let a = ledger.register(alloc(Category::Gradients, Owner::Run(1), 100));
        let b = ledger.register(alloc(Category::SplatParameters, Owner::Run(1), 50));
        let c = ledger.register(alloc(Category::Viewer, Owner::Viewer, 7));
        let snap = ledger.snapshot();
        assert_eq!(snap.total_bytes, 157);
        assert_eq!(snap.category_bytes(Category::Gradients), 100);
        assert_eq!(snap.owner_bytes(Owner::Run(1)), 150);
        assert_eq!(snap.allocations.len(), 3);
        drop((a, b));
        assert_eq!(ledger.owner_bytes(Owner::Run(1)), 0);
        let snap = ledger.snapshot();
        assert_eq!((snap.total_bytes, snap.peak_bytes), (7, 157));
        ledger.reset_peak();
        assert_eq!(ledger.snapshot().peak_bytes, 7);
        drop(c);
        let snap = ledger.snapshot();
        assert_eq!(snap.total_bytes, 0);
        assert!(
            snap.by_category.is_empty() && snap.by_owner.is_empty() && snap.allocations.is_empty()
        );
    }
}
