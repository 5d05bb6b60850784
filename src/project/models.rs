//! Models wrapped across modules (GA009): a file that accumulates gradients with no DDP wrapper
//! of its own may get its model from a function of another module that wraps it in
//! `DistributedDataParallel` and returns it (`model, opt = setup_distributed(model, opt)`).

use super::schedules::Modules;
use super::Unit;
use crate::context::{DdpElsewhere, ProjectView};

/// Each unit's calls of imported functions that return a DDP model.
pub(super) fn join(units: &[&Unit], modules: &Modules, views: &mut [ProjectView]) {
    for (u, unit) in units.iter().enumerate() {
        for c in &unit.facts.links.ddp_candidates {
            let Some(m) = modules.unit(&unit.abs, &c.module) else {
                continue;
            };
            let helper = &units[m].file;
            let mut returned = units[m].facts.links.ddp_returned.iter();
            let Some(r) = returned.find(|r| r.function == c.function) else {
                continue;
            };
            // The helper's module may hand out the sync's control too (`no_sync_unless(last)`).
            if units[m].facts.controls_grad_sync {
                continue;
            }
            let row = helper.position(r.wrapped.start).row;
            views[u].ddp_elsewhere.push(DdpElsewhere {
                at: c.at.clone(),
                function: c.function.clone(),
                wrapped_at: format!("{}:{row}", helper.display),
                reach: c.reach.clone(),
            });
        }
    }
}
