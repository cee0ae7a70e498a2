//! Release ordering respects every dependency; skipped exactly when a parent never leaves.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::model::{Dependency, Digest, RunId};

fn effect(i: usize, deps: &[usize]) -> Effect {
    Effect {
        id: EffectId(format!("eff_{i}")),
        run_id: RunId("run_x".into()),
        seq: i as u64 + 1,
        method: "POST".into(),
        url: "https://x/".into(),
        headers: Vec::new(),
        body_digest: Digest::sha256_of(b""),
        body_len: 0,
        rule: None,
        policy_revision: String::new(),
        created_at_ms: 0,
        state: EffectState::Approved,
        state_reason: None,
        decisions: Vec::new(),
        release: None,
        placeholders: Vec::new(),
        depends_on: deps
            .iter()
            .map(|d| Dependency {
                effect: EffectId(format!("eff_{d}")),
                value: format!("{d}"),
                found_in: "url".into(),
            })
            .collect(),
        inject: None,
        approval: None,
        summary: None,
        adapter: None,
        compensates: None,
        retriable: false,
        earlier_releases: Vec::new(),
        idempotency: None,
        context: None,
    }
}

/// Runs the commit loop the proxy runs: release every ready effect (outcome from
/// `fails`), skip what must be skipped, until nothing changes. Returns the release order.
fn simulate(effects: &mut [Effect], fails: &[bool]) -> Vec<usize> {
    let mut order = Vec::new();
    loop {
        let states: HashMap<EffectId, EffectState> =
            effects.iter().map(|e| (e.id.clone(), e.state)).collect();
        let mut changed = false;
        for i in 0..effects.len() {
            if effects[i].state != EffectState::Approved {
                continue;
            }
            match readiness(&effects[i], &states) {
                Readiness::Ready => {
                    order.push(i);
                    effects[i].state = if fails[i] {
                        EffectState::Failed
                    } else {
                        EffectState::Released
                    };
                    changed = true;
                }
                Readiness::Skip(_) => {
                    effects[i].state = EffectState::Skipped;
                    changed = true;
                }
                Readiness::Wait => {}
            }
        }
        if !changed {
            return order;
        }
    }
}

proptest! {
    #[test]
    fn release_order_respects_every_edge(
        shape in proptest::collection::vec((proptest::collection::vec(any::<prop::sample::Index>(), 0..3), any::<bool>(), any::<bool>()), 1..24)
    ) {
        // Effect i may depend only on effects before it: a placeholder is issued before it
        // can be carried, so cycles cannot be built.
        let mut effects: Vec<Effect> = shape
            .iter()
            .enumerate()
            .map(|(i, (deps, _, _))| {
                let deps: Vec<usize> = if i == 0 { Vec::new() } else { deps.iter().map(|d| d.index(i)).collect() };
                effect(i, &deps)
            })
            .collect();
        for (i, (_, rejected, _)) in shape.iter().enumerate() {
            if *rejected { effects[i].state = EffectState::Rejected; }
        }
        let fails: Vec<bool> = shape.iter().map(|(_, _, f)| *f).collect();
        let order = simulate(&mut effects, &fails);
        let position: HashMap<usize, usize> = order.iter().enumerate().map(|(p, i)| (*i, p)).collect();
        for (i, e) in effects.iter().enumerate() {
            prop_assert!(e.state != EffectState::Approved, "every approved effect ends settled");
            let parents: Vec<usize> = e.depends_on.iter().map(|d| d.effect.0[4..].parse().unwrap_or(usize::MAX)).collect();
            if let Some(p) = position.get(&i) {
                for parent in &parents {
                    prop_assert_eq!(effects[*parent].state, EffectState::Released);
                    prop_assert!(position[parent] < *p, "parent released before child");
                }
            }
            if e.state == EffectState::Skipped {
                prop_assert!(parents.iter().any(|p| effects[*p].state != EffectState::Released));
            }
        }
    }
}
