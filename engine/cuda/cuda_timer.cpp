// SPDX-License-Identifier: MIT
// The CUDA backend's action timer (cuda_timer.h).
#include "cuda_timer.h"

#include <ctime>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "cuda_util.h"

namespace pw::engine::cuda {

namespace {

double monotonicNow()
{
    timespec ts {};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// Device spans from event pairs, on the host's monotonic clock.
class CudaTimer final : public ActionTimer
{
public:
    CudaTimer(int device, cudaStream_t stream)
        : m_device(device)
        , m_stream(stream)
    {
        useDevice(device);
        PW_CUDA(cudaEventCreate(&m_anchor));
        PW_CUDA(cudaEventCreate(&m_candidate));
        PW_CUDA(cudaStreamSynchronize(stream));
        for (int attempt = 0; attempt < 5 && !tryAnchor(); ++attempt) { }
        if (m_anchorTime == 0.0)
            forceAnchor();
    }
    ~CudaTimer() override
    {
        for (auto& a : m_pending) {
            cudaEventDestroy(a.begin);
            if (a.end)
                cudaEventDestroy(a.end);
        }
        for (cudaEvent_t e : m_pool)
            cudaEventDestroy(e);
        cudaEventDestroy(m_anchor);
        cudaEventDestroy(m_candidate);
    }

    std::uint64_t begin() override
    {
        std::lock_guard lock(m_mutex);
        useDevice(m_device);
        cudaEvent_t e = take();
        PW_CUDA(cudaEventRecord(e, m_stream));
        m_pending.push_back({m_next, e, nullptr});
        return m_next++;
    }

    void end(std::uint64_t ticket) override
    {
        std::lock_guard lock(m_mutex);
        for (auto& a : m_pending)
            if (a.ticket == ticket && !a.end) {
                useDevice(m_device);
                a.end = take();
                PW_CUDA(cudaEventRecord(a.end, m_stream));
                return;
            }
    }

    void resolve(const std::function<void(std::uint64_t, double, double)>& done, bool wait) override
    {
        std::vector<std::tuple<std::uint64_t, double, double>> finished;
        {
            std::lock_guard lock(m_mutex);
            useDevice(m_device);
            while (!m_pending.empty()) {
                Action& a = m_pending.front();
                if (!a.end)
                    break; // begun, not ended: later actions wait for it (spans are reported in begin order)
                if (wait)
                    PW_CUDA(cudaEventSynchronize(a.end));
                else if (!eventDone(a.end))
                    break;
                float ms0 = 0.0f, ms1 = 0.0f;
                PW_CUDA(cudaEventElapsedTime(&ms0, m_anchor, a.begin));
                PW_CUDA(cudaEventElapsedTime(&ms1, m_anchor, a.end));
                finished.emplace_back(a.ticket, m_anchorTime + ms0 * 1e-3, m_anchorTime + ms1 * 1e-3);
                m_pool.push_back(a.begin);
                m_pool.push_back(a.end);
                m_pending.pop_front();
            }
            // Elapsed times are floats of milliseconds since the anchor: anchor again now and then, when nothing
            // is pending and the stream is idle, so that they stay small.
            if (m_pending.empty() && monotonicNow() - m_anchorTime > 1.0 && streamIdle())
                tryAnchor();
        }
        for (const auto& [ticket, t0, t1] : finished)
            done(ticket, t0, t1);
    }

private:
    struct Action
    {
        std::uint64_t ticket;
        cudaEvent_t begin;
        cudaEvent_t end;
    };

    cudaEvent_t take()
    {
        if (!m_pool.empty()) {
            cudaEvent_t e = m_pool.back();
            m_pool.pop_back();
            return e;
        }
        cudaEvent_t e = nullptr;
        PW_CUDA(cudaEventCreate(&e));
        return e;
    }

    bool streamIdle()
    {
        const cudaError_t status = cudaStreamQuery(m_stream);
        if (status == cudaErrorNotReady) {
            (void)cudaGetLastError();
            return false;
        }
        PW_CUDA(status);
        return true;
    }

    /// Records an event on the idle stream and reads the clock around its completion: kept as the anchor only when
    /// the two readings are close, i.e. no work slipped in before the event (its host time is then their middle).
    bool tryAnchor()
    {
        const double before = monotonicNow();
        PW_CUDA(cudaEventRecord(m_candidate, m_stream));
        PW_CUDA(cudaEventSynchronize(m_candidate));
        const double after = monotonicNow();
        if (after - before > 200e-6)
            return false;
        std::swap(m_anchor, m_candidate);
        m_anchorTime = 0.5 * (before + after);
        return true;
    }

    /// The anchor when the stream never looked idle: the event completed at the latest when the wait returned.
    void forceAnchor()
    {
        PW_CUDA(cudaEventRecord(m_anchor, m_stream));
        PW_CUDA(cudaEventSynchronize(m_anchor));
        m_anchorTime = monotonicNow();
    }

    int m_device;
    cudaStream_t m_stream;
    std::mutex m_mutex;
    cudaEvent_t m_anchor = nullptr, m_candidate = nullptr;
    double m_anchorTime = 0.0;
    std::deque<Action> m_pending;
    std::vector<cudaEvent_t> m_pool;
    std::uint64_t m_next = 0;
};

} // namespace

std::unique_ptr<ActionTimer> makeTimer(int device, cudaStream_t stream)
{
    return std::make_unique<CudaTimer>(device, stream);
}

} // namespace pw::engine::cuda
