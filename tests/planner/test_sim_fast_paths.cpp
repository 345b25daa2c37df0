// SPDX-License-Identifier: MIT
// The simulator's fast paths against the straightforward computations they replace, on small random cases: the
// cost model's per-stage totals (once per device type and tensor-parallel group, not per device) and the uplink
// calendar's booking of a transfer that fits the first free gap.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "planner/costs.h"
#include "planner/sim/link_calendar.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

/// `stages` stages of random layers on a cluster of nodes of two device types (one with a relative speed), each
/// stage on `replicas` shuffled devices, tensor-parallel groups of `tp`.
Plan randomPlan(std::mt19937& rng, int stages, int replicas, int tp)
{
    std::uniform_real_distribution<double> u(0.5, 2.0);
    Plan plan;
    const int layers = stages * 3;
    for (int l = 0; l < layers; ++l) {
        Layer layer;
        layer.name = "l" + std::to_string(l);
        layer.kind = l == 0 ? "embedding" : l == layers - 1 ? "head" : "transformer_layer";
        layer.forward_ms = u(rng);
        layer.backward_ms = 2 * u(rng);
        layer.weight_bytes = 1e6 * u(rng);
        layer.activation_bytes = 1e5 * u(rng);
        layer.weight_gradient_bytes = 1e5 * u(rng);
        plan.model.edit().layers.push_back(layer);
    }
    DeviceType slow {"slow", 80e9, 100, 0, {}, 0};
    slow.relative_speed = 0.5;
    plan.cluster.edit().device_types = {{"fast", 80e9, 200, 0, {}, 0}, slow};
    const int devices = stages * replicas, perNode = 2;
    for (int n = 0; n < (devices + perNode - 1) / perNode; ++n)
        plan.cluster.edit().nodes.push_back(
            {"n" + std::to_string(n), "", 22, "", n % 3 == 1 ? "slow" : "fast", perNode, 1e11 * u(rng), 1e-6 * u(rng)});
    plan.cluster.edit().inter_node_bandwidth_bytes_per_s = 1e10;
    plan.cluster.edit().inter_node_latency_s = 1e-5;
    std::vector<int> ids(devices);
    for (int d = 0; d < devices; ++d)
        ids[d] = d;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int s = 0; s < stages; ++s) {
        PlanStage st {s * 3, s * 3 + 2, {}};
        st.devices.assign(ids.begin() + s * replicas, ids.begin() + (s + 1) * replicas);
        plan.stages.push_back(st);
    }
    plan.tensor_parallel = tp;
    plan.schedule.kind = "1f1b";
    plan.schedule.microbatches = 4;
    return plan;
}

/// The uplink calendar as first written: every transfer split into pieces around the bookings before it.
class ReferenceCalendar
{
public:
    double book(double t, double seconds)
    {
        std::sort(m_busy.begin(), m_busy.end());
        std::vector<std::pair<double, double>> pieces;
        double at = t;
        for (auto [a, b] : m_busy)
            if (a <= at) // a transfer of no length leaves once the link is free
                at = std::max(at, b);
        double end = at;
        while (seconds > 0) {
            double gapEnd = std::numeric_limits<double>::infinity();
            for (auto [a, b] : m_busy) { // in start order: past every booking that began by `at`
                if (a > at) {
                    gapEnd = a;
                    break;
                }
                at = std::max(at, b);
            }
            const double use = std::min(seconds, gapEnd - at);
            pieces.emplace_back(at, at + use);
            seconds -= use;
            end = at + use;
            at = gapEnd;
        }
        m_busy.insert(m_busy.end(), pieces.begin(), pieces.end());
        return end;
    }

private:
    std::vector<std::pair<double, double>> m_busy;
};

} // namespace

TEST_CASE("cost model: totals once per device type and group match the per-device computation")
{
    std::mt19937 rng(23);
    for (int round = 0; round < 40; ++round) {
        const int tp = round % 3 == 0 ? 1 : round % 3 == 1 ? 2 : 4;
        const int stages = 1 + round % 4;
        const Plan plan = randomPlan(rng, stages, tp * (1 + round % 3), tp);
        const CostModel cost = CostModel::fromPlan(plan);
        std::size_t i = 0;
        for (int s = 0; s < plan.stageCount(); ++s) {
            const auto& devices = plan.stages[s].devices;
            for (std::size_t r = 0; r < devices.size(); ++r, ++i) {
                INFO("round " << round << " stage " << s << " replica " << r);
                const StageTotals t = stageTotals(plan, s, plan.cluster->typeOf(devices[r]));
                double tpForward = 0, tpBackward = 0;
                if (tp > 1) {
                    const std::size_t first = r - r % tp;
                    const std::vector<int> group(devices.begin() + first, devices.begin() + first + tp);
                    const double bw = plan.cluster->groupBandwidth(group), lat = plan.cluster->groupLatency(group);
                    tpForward = tensorParallelTime(t.tp_forward_bytes, t.tp_forward_allreduces, tp, bw, lat);
                    tpBackward = tensorParallelTime(t.tp_backward_bytes, t.tp_backward_allreduces, tp, bw, lat);
                }
                REQUIRE(cost.forward(s, static_cast<int>(r)) == t.forward_s + tpForward);
                REQUIRE(cost.backward(s, static_cast<int>(r)) == t.backward_s + tpBackward);
                REQUIRE(cost.tp_forward_s[i] == tpForward);
                REQUIRE(cost.tp_backward_s[i] == tpBackward);
                REQUIRE(cost.backward_weight_share[i] == (t.backward_s > 0 ? t.backward_weight_s / t.backward_s : 0.5));
            }
            const StageTotals first = stageTotals(plan, s, plan.cluster->typeOf(devices[0]));
            REQUIRE(cost.stage_weight_bytes[s] == first.weight_bytes);
            REQUIRE(cost.stage_activation_bytes[s] == first.activation_bytes);
            REQUIRE(cost.stage_optimizer_bytes[s] == first.optimizer_bytes);
        }
        REQUIRE(i == cost.forward_s.size());
    }
}

TEST_CASE("link calendar: booking in the first free gap matches splitting every transfer")
{
    std::mt19937 rng(6);
    std::uniform_real_distribution<double> start(0.0, 10.0), length(0.0, 1.5);
    for (int round = 0; round < 50; ++round) {
        LinkCalendar fast;
        ReferenceCalendar reference;
        for (int k = 0; k < 60; ++k) {
            // Some transfers at once, some at times already booked, some of no length.
            const double t = k % 7 == 0 ? 0.0 : start(rng), seconds = k % 11 == 0 ? 0.0 : length(rng);
            INFO("round " << round << " transfer " << k);
            REQUIRE(fast.book(t, seconds) == reference.book(t, seconds));
        }
    }
}
