// SPDX-License-Identifier: MIT
// Zero-bubble schedules (zb-h1, zb-h2, zbv), dualpipev, v-half and v-min through real agent processes: the engine
// computes each backward as an I and a later W, and the run gives the losses of the in-process 1F1B plan of the same
// stages (the same math in another order); every action, I and W included, lands once as a span of its own kind.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "app/history/history.h"
#include "app/run/controller.h"
#include "engine/local_run.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/run/local_run_fixtures.h"
#include "tests/run/process_helpers.h"

using namespace pw;
using planner::ActionKind;
using pw::test::gpt2Plan;
using pw::test::StageCut;
using pw::test::tinyGpt2;
using pw::test::vOnFourDevices;

namespace {

constexpr int kZeroBubbleRunSteps = 3;
constexpr int kMicrobatches = 8;

void runAndCompare(const planner::Plan& zb, const planner::Plan& reference)
{
    test::TempDir dir;
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    const auto want = test::inProcessLosses(reference, kZeroBubbleRunSteps); // 1F1B, in this process
    REQUIRE(want.size() == kZeroBubbleRunSteps);
    app::RunController controller(test::localRunRequest(zb, kZeroBubbleRunSteps, "zero-bubble test plan"), history);
    const auto outcome = controller.run();
    INFO(outcome.message);
    REQUIRE(outcome.status == app::RunStatus::Succeeded);
    REQUIRE(outcome.losses.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
        INFO("step " << i);
        CHECK(outcome.losses[i] == Approx(want[i]).epsilon(1e-6));
    }
    // Every action once, as a span of its kind: the I and W spans too, and a fused backward only where the schedule
    // has one (dualpipev).
    const auto schedule = engine::runSchedule(zb, kZeroBubbleRunSteps);
    const auto measured = history.measuredTimeline(outcome.run_id);
    CHECK(measured.spans.size() == schedule.actionCount());
    std::set<std::pair<int, int>> seen;
    std::size_t inputs = 0, weights = 0, fused = 0;
    for (const auto& s : measured.spans) {
        INFO("device " << s.device << " action " << s.action);
        CHECK(seen.insert({s.device, s.action}).second);
        const auto& a = schedule.devices.at(static_cast<std::size_t>(s.device)).at(static_cast<std::size_t>(s.action));
        CHECK(s.kind == a.kind);
        CHECK(s.stage == a.stage);
        CHECK(s.microbatch == a.microbatch);
        CHECK(s.t1 >= s.t0);
        fused += s.kind == ActionKind::Backward ? 1 : 0;
        inputs += s.kind == ActionKind::BackwardInput ? 1 : 0;
        weights += s.kind == ActionKind::BackwardWeight ? 1 : 0;
    }
    const auto each = static_cast<std::size_t>(kZeroBubbleRunSteps * kMicrobatches * zb.stageCount());
    CHECK(inputs + fused == each);
    CHECK(weights == inputs);
    CHECK(inputs > 0);
    CHECK((fused > 0) == (zb.schedule.kind == "dualpipev"));
}

const std::vector<StageCut> kTwo = {{0, 3, {0}}, {4, 7, {1}}};
const std::vector<StageCut> kFour = {{0, 1, {0}}, {2, 3, {1}}, {4, 5, {2}}, {6, 7, {3}}};

} // namespace

TEST_CASE("zb-h1 and zb-h2 through agents give 1F1B's losses with 2 and 4 stages", "[run][local]")
{
    const auto shape = tinyGpt2(6); // 8 layers: embedding, 6 blocks, head
    for (const char* kind : {"zb-h1", "zb-h2"}) {
        SECTION(std::string(kind) + " 2 stages")
        {
            runAndCompare(gpt2Plan(shape, kTwo, kind, kMicrobatches), gpt2Plan(shape, kTwo, "1f1b", kMicrobatches));
        }
        SECTION(std::string(kind) + " 4 stages")
        {
            runAndCompare(gpt2Plan(shape, kFour, kind, kMicrobatches), gpt2Plan(shape, kFour, "1f1b", kMicrobatches));
        }
    }
}

TEST_CASE("zbv through agents gives 1F1B's losses on 2 and 4 devices", "[run][local]")
{
    // Two chunks per device in a V: the turn of the V (virtual stages p - 1 and p) and the tied embedding and head
    // (virtual stages 0 and 2p - 1) are on one device; the 1F1B reference runs each virtual stage on a device of its
    // own.
    const auto shape = tinyGpt2(6);
    SECTION("2 devices")
    {
        const std::vector<StageCut> v = {{0, 1, {0}}, {2, 3, {1}}, {4, 5, {1}}, {6, 7, {0}}};
        runAndCompare(gpt2Plan(shape, v, "zbv", kMicrobatches, 2), gpt2Plan(shape, kFour, "1f1b", kMicrobatches));
    }
    SECTION("4 devices")
    {
        const auto [v, straight] = vOnFourDevices();
        runAndCompare(gpt2Plan(shape, v, "zbv", kMicrobatches, 2), gpt2Plan(shape, straight, "1f1b", kMicrobatches));
    }
}

TEST_CASE("dualpipev through agents gives 1F1B's losses on 2 devices", "[run][local]")
{
    // DualPipeV's V on 2 devices, its F&B pairs received and sent as units; 8 microbatches (it needs 2p = 4).
    const auto shape = tinyGpt2(6);
    const std::vector<StageCut> v = {{0, 1, {0}}, {2, 3, {1}}, {4, 5, {1}}, {6, 7, {0}}};
    runAndCompare(gpt2Plan(shape, v, "dualpipev", kMicrobatches, 2), gpt2Plan(shape, kFour, "1f1b", kMicrobatches));
}

TEST_CASE("v-half and v-min through agents give 1F1B's losses on 2 devices", "[run][local]")
{
    // The controllable-memory V schedules: the authors' greedy order on 2 devices, 8 microbatches.
    const auto shape = tinyGpt2(6);
    const std::vector<StageCut> v = {{0, 1, {0}}, {2, 3, {1}}, {4, 5, {1}}, {6, 7, {0}}};
    for (const char* kind : {"v-half", "v-min"}) {
        INFO(kind);
        runAndCompare(gpt2Plan(shape, v, kind, kMicrobatches, 2), gpt2Plan(shape, kFour, "1f1b", kMicrobatches));
    }
}
