// SPDX-License-Identifier: MIT
#include "schema.h"

#include <array>

#include "app/history/history.h"

namespace pw::app {

namespace {

/// Migration k takes a file from schema version k to k + 1, in one transaction with the user_version update.
/// Never edit a step once released: add one.
constexpr std::array kMigrations = {
    // 1: the first schema. Spans store lanes and action kinds as the planner enums' numbers (pinned below).
    // Predicted spans (source 0) have agent -1 and their position in the timeline as seq, so that the one unique
    // index serves per-run reads (predicted ones in order), lastSequence() and INSERT OR IGNORE's duplicate check.
    // (A WITHOUT ROWID spans table clustered on that key ingests 40% slower: wide rows inserted mid-tree.)
    std::string_view(R"sql(
CREATE TABLE runs (
    id TEXT PRIMARY KEY NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'stopped', 'interrupted')),
    status_message TEXT NOT NULL DEFAULT '',
    started_unix_s REAL NOT NULL,
    ended_unix_s REAL NOT NULL DEFAULT 0,
    controller_host TEXT NOT NULL DEFAULT '',
    controller_pid INTEGER NOT NULL DEFAULT 0,
    steps_planned INTEGER NOT NULL DEFAULT 0,
    predicted_steps INTEGER NOT NULL DEFAULT 0,
    plan_json TEXT NOT NULL DEFAULT '',
    cluster_json TEXT NOT NULL DEFAULT '',
    hosts_json TEXT NOT NULL DEFAULT ''
);
CREATE INDEX runs_by_start ON runs (started_unix_s);
CREATE TABLE tags (
    run TEXT NOT NULL,
    tag TEXT NOT NULL,
    PRIMARY KEY (run, tag)
) WITHOUT ROWID;
CREATE INDEX tags_by_tag ON tags (tag);
CREATE TABLE run_devices (
    run TEXT NOT NULL,
    device INTEGER NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (run, device)
) WITHOUT ROWID;
CREATE TABLE spans (
    run TEXT NOT NULL,
    source INTEGER NOT NULL,
    device INTEGER NOT NULL,
    lane INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    stage INTEGER NOT NULL,
    microbatch INTEGER NOT NULL,
    action INTEGER NOT NULL,
    weight_version INTEGER NOT NULL,
    peer INTEGER NOT NULL,
    bytes REAL NOT NULL,
    t0 REAL NOT NULL,
    t1 REAL NOT NULL,
    agent INTEGER NOT NULL,
    seq INTEGER NOT NULL
);
CREATE UNIQUE INDEX spans_by_sequence ON spans (run, agent, seq);
CREATE TABLE metrics (
    run TEXT NOT NULL,
    step INTEGER NOT NULL,
    name TEXT NOT NULL,
    value REAL NOT NULL,
    t_s REAL NOT NULL,
    device INTEGER NOT NULL DEFAULT -1,
    unit TEXT NOT NULL DEFAULT ''
);
CREATE INDEX metrics_by_run ON metrics (run, name);
CREATE TABLE logs (
    run TEXT NOT NULL,
    t_s REAL NOT NULL,
    agent INTEGER NOT NULL DEFAULT -1,
    device INTEGER NOT NULL DEFAULT -1,
    level TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL DEFAULT ''
);
CREATE INDEX logs_by_run ON logs (run);
)sql"),
    // 2: spans name their run by an integer key (runs.run_key) instead of the run's id text: 48 bytes less per
    // span between the row and its index, which the live ingest writes millions of.
    std::string_view(R"sql(
ALTER TABLE runs ADD COLUMN run_key INTEGER;
UPDATE runs SET run_key = rowid;
CREATE UNIQUE INDEX runs_by_key ON runs (run_key);
CREATE TABLE spans_keyed (
    run INTEGER NOT NULL,
    source INTEGER NOT NULL,
    device INTEGER NOT NULL,
    lane INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    stage INTEGER NOT NULL,
    microbatch INTEGER NOT NULL,
    action INTEGER NOT NULL,
    weight_version INTEGER NOT NULL,
    peer INTEGER NOT NULL,
    bytes REAL NOT NULL,
    t0 REAL NOT NULL,
    t1 REAL NOT NULL,
    agent INTEGER NOT NULL,
    seq INTEGER NOT NULL
);
INSERT INTO spans_keyed SELECT r.run_key, s.source, s.device, s.lane, s.kind, s.stage, s.microbatch, s.action,
    s.weight_version, s.peer, s.bytes, s.t0, s.t1, s.agent, s.seq FROM spans s JOIN runs r ON r.id = s.run;
DROP TABLE spans;
ALTER TABLE spans_keyed RENAME TO spans;
CREATE UNIQUE INDEX spans_by_sequence ON spans (run, agent, seq);
)sql"),
    // 3: a metric's value may be NULL: a loss that stopped being finite is kept (NaN as NULL; SQLite stores
    // infinities as they are), where NOT NULL lost the whole run. runs.updated_unix_s is the time of the run's
    // last recorded event (span, metric or log), where an interrupted run's duration ends.
    std::string_view(R"sql(
CREATE TABLE metrics_nullable (
    run TEXT NOT NULL,
    step INTEGER NOT NULL,
    name TEXT NOT NULL,
    value REAL,
    t_s REAL NOT NULL,
    device INTEGER NOT NULL DEFAULT -1,
    unit TEXT NOT NULL DEFAULT ''
);
INSERT INTO metrics_nullable (rowid, run, step, name, value, t_s, device, unit)
    SELECT rowid, run, step, name, value, t_s, device, unit FROM metrics;
DROP TABLE metrics;
ALTER TABLE metrics_nullable RENAME TO metrics;
CREATE INDEX metrics_by_run ON metrics (run, name);
ALTER TABLE runs ADD COLUMN updated_unix_s REAL NOT NULL DEFAULT 0;
UPDATE runs SET updated_unix_s = max(started_unix_s, ended_unix_s);
)sql"),
    // 4: one clock for runs over several hosts. Each agent's clock against the controller's (offset = agent -
    // controller, uncertainty = half the round trip of the sample used), and the clock the run's measured spans are
    // on: 'host' (every agent on the controller's host) or 'aligned' (moved onto the controller's clock).
    std::string_view(R"sql(
CREATE TABLE agent_clocks (
    run TEXT NOT NULL,
    agent INTEGER NOT NULL,
    host TEXT NOT NULL DEFAULT '',
    offset_s REAL NOT NULL,
    uncertainty_s REAL NOT NULL,
    samples INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run, agent)
);
ALTER TABLE runs ADD COLUMN clock TEXT NOT NULL DEFAULT 'host' CHECK (clock IN ('host', 'aligned'));
)sql"),
    // 5: hangs that name their cause. A run that stalled keeps the controller's report (the chain of waits) and each
    // device's flight recorder: its last actions (lanes and kinds as in spans; t0/t1 on the run's clock as spans
    // are), an action still in progress with in_progress = 1 and t1 = its t0. source: 'agent' (the agent's own
    // recorder) or 'controller' (what the controller had received from an agent that no longer answered).
    std::string_view(R"sql(
CREATE TABLE stall_reports (
    run TEXT NOT NULL,
    t_s REAL NOT NULL,
    report TEXT NOT NULL,
    chain TEXT NOT NULL DEFAULT ''
);
CREATE INDEX stall_reports_by_run ON stall_reports (run);
CREATE TABLE flight_recorder (
    run TEXT NOT NULL,
    device INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    agent INTEGER NOT NULL,
    lane INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    stage INTEGER NOT NULL,
    microbatch INTEGER NOT NULL,
    action INTEGER NOT NULL,
    weight_version INTEGER NOT NULL,
    peer INTEGER NOT NULL,
    bytes REAL NOT NULL,
    t0 REAL NOT NULL,
    t1 REAL NOT NULL,
    in_progress INTEGER NOT NULL DEFAULT 0,
    source TEXT NOT NULL DEFAULT 'agent' CHECK (source IN ('agent', 'controller')),
    PRIMARY KEY (run, device, seq)
);
)sql"),
    // 6: launchers. How a run's agents were started ('local', 'ssh', 'slurm'; earlier runs: what their hosts_json
    // says) and the scheduler's job of the run (Slurm's job id; '' for none).
    std::string_view(R"sql(
ALTER TABLE runs ADD COLUMN launcher TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN job_id TEXT NOT NULL DEFAULT '';
UPDATE runs SET launcher = coalesce(json_extract(hosts_json, '$[0].launcher'), '') WHERE json_valid(hosts_json);
)sql"),
};
static_assert(kMigrations.size() == kHistorySchemaVersion, "one migration step per schema version");

} // namespace

std::span<const std::string_view> historyMigrations()
{
    return kMigrations;
}

} // namespace pw::app
