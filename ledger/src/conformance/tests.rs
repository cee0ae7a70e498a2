//! The suite against the two stores of this crate: sled and the in-memory model.

use proptest::prelude::*;

use super::{contracts, model, Backend, HealingBackend, MemoryBackend, SledBackend};

#[test]
fn sled_passes_the_contracts() {
    contracts::all(&mut SledBackend::default());
}

#[test]
fn the_healing_sled_store_passes_the_contracts() {
    contracts::all(&mut HealingBackend::default());
}

#[test]
fn memory_passes_the_contracts() {
    contracts::all(&mut MemoryBackend::default());
}

proptest! {
    // Each case opens a sled store and flushes on every durable write: keep them few.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn sled_answers_as_the_model_does(ops in model::operations(40)) {
        let mut sled = SledBackend::default();
        let mut memory = MemoryBackend::default();
        let (sled, memory) = (sled.fresh(), memory.fresh());
        if let Err(difference) = model::same_answers(&*sled, &*memory, &ops) {
            prop_assert!(false, "{}", difference);
        }
    }
}
