// SPDX-License-Identifier: MIT
// Internal to engine/: the CUDA backend's memory and ordering (cuda_backend.cpp): its stream, the events it records,
// the arena that caches freed blocks by size, the kernels' scratch, and the pinned staging chunks of uploads,
// downloads and read-backs, with the host-side bf16 conversions. cuda_backend.h describes the design.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../backend.h"
#include "../bf16.h"
#include "cuda_util.h"
#include "kernels.h"

namespace pw::engine::cuda {

constexpr std::size_t kBlockRounding = 512; // the arena's size classes
constexpr std::size_t kStageBytes = 4u << 20; // one pinned staging chunk
constexpr std::size_t kMaxStages = 8;

class Stream
{
public:
    explicit Stream(int device)
    {
        cuda::useDevice(device);
        PW_CUDA(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    }
    ~Stream() { cudaStreamDestroy(m_stream); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return m_stream; }

private:
    cudaStream_t m_stream = nullptr;
};

/// out[i] = f(in[i]) for a staging chunk's elements, on the host's threads when there are enough of them to share
/// (bf16 <-> fp32 of uploads, downloads and the host-staged transfers).
template <class In, class Out, class F> void convert(const In* in, Out* out, std::size_t n, F f)
{
    const auto count = static_cast<long>(n);
#pragma omp parallel for if (count >= (1L << 16))
    for (long i = 0; i < count; ++i)
        out[i] = f(in[i]);
}

/// A recorded point of a stream (Backend::record): a timing-free event, destroyed with its last holder.
class Event final : public DeviceEvent
{
public:
    Event() { PW_CUDA(cudaEventCreateWithFlags(&m_event, cudaEventDisableTiming)); }
    ~Event() override { cudaEventDestroy(m_event); }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    cudaEvent_t get() const { return m_event; }

private:
    cudaEvent_t m_event = nullptr;
};

/// Device memory with a cache of freed blocks per rounded size.
class Arena
{
public:
    Arena(int device, cudaStream_t stream)
        : m_device(device)
        , m_stream(stream)
    {
    }
    ~Arena()
    {
        for (auto& [p, size] : m_live)
            cudaFree(p);
        for (auto& [size, p] : m_free)
            cudaFree(p);
    }
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;

    void* allocate(std::size_t bytes)
    {
        if (bytes == 0)
            return nullptr;
        const std::size_t size = (bytes + kBlockRounding - 1) / kBlockRounding * kBlockRounding;
        std::lock_guard lock(m_mutex);
        void* p = nullptr;
        if (auto it = m_free.find(size); it != m_free.end()) {
            p = it->second;
            m_free.erase(it);
        } else {
            cuda::useDevice(m_device);
            cudaError_t status = cudaMalloc(&p, size);
            if (status == cudaErrorMemoryAllocation && !m_free.empty()) {
                // Give the cached blocks of other sizes back and try once more. They may still be in use by
                // kernels on the stream: wait for those first.
                (void)cudaGetLastError();
                PW_CUDA(cudaStreamSynchronize(m_stream));
                for (auto& [cached, q] : m_free) {
                    PW_CUDA(cudaFree(q));
                    m_stats.reserved -= cached;
                }
                m_free.clear();
                status = cudaMalloc(&p, size);
            }
            if (status != cudaSuccess) {
                (void)cudaGetLastError();
                throw std::runtime_error("cuda:" + std::to_string(m_device) + ": cannot allocate "
                    + std::to_string(bytes) + " bytes with " + std::to_string(m_stats.allocated)
                    + " allocated: " + cudaGetErrorString(status));
            }
            m_stats.reserved += size;
        }
        m_live.emplace(p, size);
        m_stats.allocated += size;
        m_stats.peak = std::max(m_stats.peak, m_stats.allocated);
        return p;
    }

    void release(void* p)
    {
        if (!p)
            return;
        std::lock_guard lock(m_mutex);
        const auto it = m_live.find(p);
        if (it == m_live.end())
            throw std::logic_error("CUDA arena: release of memory it did not allocate (or released twice)");
        m_stats.allocated -= it->second;
        m_free.emplace(it->second, p);
        m_live.erase(it);
    }

    MemoryStats stats() const
    {
        std::lock_guard lock(m_mutex);
        return m_stats;
    }

    void resetPeak()
    {
        std::lock_guard lock(m_mutex);
        m_stats.peak = m_stats.allocated;
    }

private:
    int m_device;
    cudaStream_t m_stream;
    mutable std::mutex m_mutex;
    MemoryStats m_stats;
    std::unordered_map<void*, std::size_t> m_live;
    std::multimap<std::size_t, void*> m_free;
};

/// The kernels' temporary memory (kernels.h): one arena block per slot, grown when a call needs more.
class ScratchSpace final : public cuda::Scratch
{
public:
    explicit ScratchSpace(Arena& arena)
        : m_arena(arena)
    {
    }
    ~ScratchSpace() override
    {
        for (auto& [p, size] : m_slots)
            m_arena.release(p);
    }
    void* get(Slot slot, std::size_t bytes) override
    {
        auto& [p, size] = m_slots.at(static_cast<std::size_t>(slot));
        if (size < bytes) {
            // The old block may still be read by enqueued kernels; the arena hands it out again only to work
            // enqueued after them.
            m_arena.release(std::exchange(p, nullptr));
            p = m_arena.allocate(bytes);
            size = bytes;
        }
        return p;
    }

private:
    Arena& m_arena;
    std::array<std::pair<void*, std::size_t>, SlotCount> m_slots {};
};

/// Pinned host chunks for uploads and downloads, each with the event of its last copy.
class Staging
{
public:
    struct Chunk
    {
        void* host = nullptr;
        cudaEvent_t copied = nullptr;
        bool held = false; ///< a download's data the host has not read yet
    };

    explicit Staging(int device)
        : m_device(device)
    {
    }
    ~Staging()
    {
        for (auto& c : m_chunks) {
            cudaEventSynchronize(c.copied);
            cudaEventDestroy(c.copied);
            cudaFreeHost(c.host);
        }
    }
    Staging(const Staging&) = delete;
    Staging& operator=(const Staging&) = delete;

    /// A chunk whose last copy has completed: a free one, a new one, or (eight in flight) the oldest, waited for.
    Chunk& acquire()
    {
        const std::size_t n = m_chunks.size();
        for (std::size_t i = 0; i < n; ++i) {
            Chunk& c = m_chunks[(m_next + i) % n];
            if (!c.held && cuda::eventDone(c.copied)) {
                m_next = (m_next + i + 1) % n;
                return c;
            }
        }
        if (n < kMaxStages) {
            cuda::useDevice(m_device);
            Chunk c;
            PW_CUDA(cudaMallocHost(&c.host, kStageBytes));
            const cudaError_t status = cudaEventCreateWithFlags(&c.copied, cudaEventDisableTiming);
            if (status != cudaSuccess) {
                cudaFreeHost(c.host);
                PW_CUDA(status);
            }
            m_chunks.push_back(c);
            return m_chunks.back();
        }
        for (std::size_t i = 0; i < n; ++i) {
            Chunk& c = m_chunks[(m_next + i) % n];
            if (!c.held) {
                PW_CUDA(cudaEventSynchronize(c.copied));
                m_next = (m_next + i + 1) % n;
                return c;
            }
        }
        throw std::logic_error("CUDA staging: every chunk is held");
    }

private:
    int m_device;
    std::deque<Chunk> m_chunks; // a deque: references stay valid as it grows
    std::size_t m_next = 0;
};

} // namespace pw::engine::cuda
