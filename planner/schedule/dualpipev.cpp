// SPDX-License-Identifier: MIT
// DualPipeV (DeepSeek-V3's DualPipe cut in half, as torch.distributed.pipelining's ScheduleDualPipeV): two chunks
// per device in a V, the steady state pairing a forward of one chunk with a full backward of the other (F&B), the
// warm-up's and cool-down's backwards split into I and W where that fills a bubble.
#include <deque>
#include <string>
#include <utility>

#include "../errors.h"
#include "builder.h"

namespace pw::planner {
namespace {

/// @brief One device's DualPipeV program as rank `rank` of p over n >= 2p microbatches: torch's
/// ScheduleDualPipeV._calculate_single_rank_operations (itself DeepSeek's dualpipev.py), step for step. Chunk 0 is
/// virtual stage rank, chunk 1 virtual stage 2p - 1 - rank. Microbatches count per chunk and kind: a full backward
/// advances its chunk's I and W counters together; an I queues its W, which the next pending-W slot emits (oldest
/// first).
class DualPipeVOrder
{
public:
    /// emit(chunk, kind, microbatch) for a single action: kind Forward, Backward (full), BackwardInput or
    /// BackwardWeight; pair(chunk, microbatch, backward's microbatch) for an F&B pair: a forward of `chunk` with a full
    /// backward of the other chunk.
    template <class Emit, class Pair> static void run(int p, int rank, int n, Emit&& emit, Pair&& emitPair)
    {
        DualPipeVOrder o;
        auto op = [&](int chunk, ActionKind kind) {
            if (kind == ActionKind::Forward) {
                emit(chunk, kind, o.m_forward[chunk]++);
                return;
            }
            const int k = o.m_backward[chunk]++;
            if (kind == ActionKind::BackwardInput)
                o.m_pendingWeights.emplace_back(chunk, k);
            emit(chunk, kind, k);
        };
        auto pendingWeight = [&] {
            if (o.m_pendingWeights.empty())
                return;
            const auto [chunk, k] = o.m_pendingWeights.front();
            o.m_pendingWeights.pop_front();
            emit(chunk, ActionKind::BackwardWeight, k);
        };
        auto pair = [&](int f) {
            const int fk = o.m_forward[f]++, bk = o.m_backward[1 - f]++;
            emitPair(f, fk, bk);
        };
        // 1: chunk 0's forwards until the V's turn reaches this device; 2: both chunks' forwards.
        for (int i = 0; i < 2 * (p - rank - 1); ++i)
            op(0, ActionKind::Forward);
        for (int i = 0; i < rank + 1; ++i) {
            op(0, ActionKind::Forward);
            op(1, ActionKind::Forward);
        }
        // 3: zero-bubble warm-up of chunk 1 (the loss is at the bottom of the V): I, its W, the next forward.
        for (int i = 0; i < p - rank - 1; ++i) {
            op(1, ActionKind::BackwardInput);
            pendingWeight();
            op(1, ActionKind::Forward);
        }
        // 4: the steady state, F0&B1 then F1&B0; the last device's first pair runs apart (a smaller bubble).
        for (int i = 0; i < n - 2 * p + rank + 1; ++i) {
            if (i == 0 && rank == p - 1) {
                op(0, ActionKind::Forward);
                op(1, ActionKind::Backward);
            } else {
                pair(0);
            }
            pair(1);
        }
        // 5: chunk 1's backwards as the drain reaches it, each with an F1&B0.
        for (int i = 0; i < p - rank - 1; ++i) {
            op(1, ActionKind::Backward);
            pair(1);
        }
        // 6: both chunks' backwards, the second half split (zero bubble: their W fill the tail).
        bool split = false;
        const int tail = rank + 1;
        for (int i = 0; i < tail; ++i) {
            if (i == tail / 2 && rank % 2 == 1)
                split = true;
            op(1, split ? ActionKind::BackwardInput : ActionKind::Backward);
            if (i == tail / 2 && rank % 2 == 0)
                split = true;
            op(0, split ? ActionKind::BackwardInput : ActionKind::Backward);
        }
        // 7: chunk 0's last backwards, a pending W before each; 8: the W left.
        for (int i = 0; i < p - rank - 1; ++i) {
            pendingWeight();
            op(0, split ? ActionKind::BackwardInput : ActionKind::Backward);
        }
        for (int i = 0; i < rank + 1; ++i)
            pendingWeight();
    }

private:
    int m_forward[2] = {0, 0};
    int m_backward[2] = {0, 0};
    std::deque<std::pair<int, int>> m_pendingWeights; ///< (chunk, microbatch) of every I whose W is pending
};

class DualPipeVGenerator final : public ScheduleGenerator
{
public:
    std::string_view name() const override { return "dualpipev"; }
    std::string_view description() const override
    {
        return "DualPipeV (DeepSeek-V3's DualPipe on half the devices, torch's ScheduleDualPipeV): two chunks per "
               "device in a V, a forward of one chunk paired with a backward of the other; needs 2p microbatches";
    }
    const ScheduleTraits& traits() const override
    {
        static const ScheduleTraits traits {.in_flight_limit = InFlightLimit::FirstStage,
            .steady_state = SteadyState::BatchToBatch,
            .min_iterations = 3,
            .batch_covers_virtual_stages = true,
            .chunks = ChunkRule::V,
            .splits_backward = true,
            .replicas_alike = true};
        return traits;
    }

    Schedule generate(const Plan& plan) const override
    {
        return buildV(plan, name(), [this](int p, int count) {
            if (count < 2 * p)
                throw InputError({}, 0, "/schedule/microbatches",
                    "'" + std::string(name())
                        + "' needs at least as many microbatches per copy of the V as virtual stages (2p = "
                        + std::to_string(2 * p) + "), not " + std::to_string(count)
                        + " (torch's ScheduleDualPipeV refuses fewer as well)");
            VPrograms ranks(p);
            for (int rank = 0; rank < p; ++rank)
                DualPipeVOrder::run(
                    p, rank, count,
                    [&](int chunk, ActionKind kind, int i) {
                        ranks[rank].push_back({chunk, kind, i});
                    },
                    [&](int chunk, int fi, int bi) {
                        ranks[rank].push_back({chunk, ActionKind::Forward, fi, bi});
                    });
            return ranks;
        });
    }
};

} // namespace

const ScheduleGenerator& dualPipeVGenerator()
{
    static const DualPipeVGenerator generator;
    return generator;
}

} // namespace pw::planner
