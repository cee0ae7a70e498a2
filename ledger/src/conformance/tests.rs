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

#[test]
fn postgres_passes_the_contracts() {
    let Some(server) = super::postgres::TestServer::start() else {
        return;
    };
    contracts::all(&mut super::postgres::PgBackend::new(std::sync::Arc::new(
        server,
    )));
}

#[test]
fn postgres_answers_as_the_model_does() {
    use proptest::test_runner::{Config, TestRunner};
    let Some(server) = super::postgres::TestServer::start() else {
        return;
    };
    let postgres =
        std::sync::Mutex::new(super::postgres::PgBackend::new(std::sync::Arc::new(server)));
    // One server for every case, a fresh database per case.
    let mut runner = TestRunner::new(Config {
        cases: 16,
        ..Config::default()
    });
    let outcome = runner.run(&model::operations(40), |ops| {
        let mut memory = MemoryBackend::default();
        let pg = postgres.lock().unwrap_or_else(|e| e.into_inner()).fresh();
        let memory = memory.fresh();
        if let Err(difference) = model::same_answers(&*pg, &*memory, &ops) {
            prop_assert!(false, "{}", difference);
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}
