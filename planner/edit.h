// SPDX-License-Identifier: MIT
// Edits of a plan by hand: what the desktop app's boundary handles and stage menus do (each one step of its
// undo stack). Every edit returns a new, validated plan or throws InputError saying why it cannot be made.
#pragma once

#include <string>
#include <vector>

#include "plan.h"

namespace pw::planner::edit {

/// Whether a plan can be edited stage by stage: one pipeline and one chunk per device (interleaved and
/// HetPipe plans are re-planned instead). Empty when it can, else the reason.
std::string whyNotEditable(const Plan& plan);

/// Last layer (position in the plan's order) of every stage but the final one.
std::vector<int> boundaries(const Plan& plan);

/// The layer edge nearest to `position` (a fractional layer coordinate: layer i spans [i, i + 1)) that
/// boundary `boundary` (between stage `boundary` and `boundary` + 1) may take: both stages keep at least one
/// layer. Returns the last layer of stage `boundary` after the move.
int snapBoundary(const Plan& plan, int boundary, double position);

/// Moves boundary `boundary` so that stage `boundary` ends at layer `last`.
Plan moveBoundary(const Plan& plan, int boundary, int last);

/// Splits stage `stage` after layer `last` (inside the stage, not its last layer); the new second part runs on
/// `devices` (free devices of the cluster, at least one).
Plan splitStage(const Plan& plan, int stage, int last, const std::vector<int>& devices);

/// Merges stage `stage` with the next one; the merged stage keeps stage `stage`'s devices and the next one's
/// become free.
Plan mergeWithNext(const Plan& plan, int stage);

/// Runs stage `stage` on `devices` (replicas; none used by another stage).
Plan assignDevices(const Plan& plan, int stage, const std::vector<int>& devices);

/// Exchanges devices `a` and `b`, each used by a different stage: `a`'s stage runs on `b` in `a`'s place and the
/// other way round (on a fully used cluster, the way to give a stage a faster device).
Plan swapDevices(const Plan& plan, int a, int b);

/// Devices of the cluster no stage uses, ascending.
std::vector<int> freeDevices(const Plan& plan);

} // namespace pw::planner::edit
