// SPDX-License-Identifier: MIT
// What every transport shares: the tags, the default grouped exchange, and the host staging of a backend's memory
// for the transports that carry host memory (throughHost).
#include "transport.h"

#include <map>
#include <mutex>
#include <vector>

namespace pw::engine {

std::uint64_t transferTag(bool gradient, int stage, int microbatch)
{
    return (static_cast<std::uint64_t>(microbatch) << 24) | (static_cast<std::uint64_t>(stage) << 1)
        | (gradient ? 1u : 0u);
}

std::uint64_t waveTag(int stage, int wave)
{
    return (std::uint64_t {1} << 63) | (static_cast<std::uint64_t>(wave) << 24)
        | (static_cast<std::uint64_t>(stage) << 1);
}

Handle whenWaited(std::function<void()> work)
{
    class Deferred final : public Handle::Work
    {
    public:
        explicit Deferred(std::function<void()> work)
            : m_work(std::move(work))
        {
        }
        void wait() override { m_work(); }

    private:
        std::function<void()> m_work;
    };
    return Handle(std::make_unique<Deferred>(std::move(work)));
}

std::vector<Handle> Transport::exchange(std::span<const Transfer> transfers)
{
    std::vector<Handle> handles(transfers.size());
    for (const bool sends : {false, true})
        for (std::size_t i = 0; i < transfers.size(); ++i) {
            const Transfer& t = transfers[i];
            if ((t.direction == Transfer::Direction::Send) != sends)
                continue;
            handles[i] = sends ? send(t.peer, t.tag, t.region) : recv(t.peer, t.tag, t.region);
        }
    return handles;
}

namespace {

/// Host staging buffers, kept for reuse: a transfer takes one of its size and gives it back when its operation is
/// done, so that after the first step the host staging allocates nothing.
class StagingPool
{
public:
    std::vector<std::byte> take(std::size_t bytes)
    {
        std::lock_guard lock(m_mutex);
        if (auto it = m_free.find(bytes); it != m_free.end()) {
            std::vector<std::byte> v = std::move(it->second);
            m_free.erase(it);
            return v;
        }
        return std::vector<std::byte>(bytes);
    }
    void give(std::vector<std::byte> v)
    {
        std::lock_guard lock(m_mutex);
        m_free.emplace(v.size(), std::move(v));
    }

private:
    std::mutex m_mutex;
    std::multimap<std::size_t, std::vector<std::byte>> m_free;
};

/// A receive or an all-reduce through host memory: the host operation's handle, then the upload of its result (a
/// transfer's bytes as they came; an all-reduce's fp32 sum converted to the region's type).
class Upload final : public Handle::Work
{
public:
    Upload(Backend& backend, Region target, StagingPool& pool, std::vector<std::byte> staging, bool raw)
        : m_backend(backend)
        , m_target(target)
        , m_pool(pool)
        , m_staging(std::move(staging))
        , m_raw(raw)
    {
    }
    Region staged()
    {
        return m_raw ? Region {m_staging.data(), m_target.dtype, m_target.count}
                     : Region {m_staging.data(), DType::F32, m_target.count};
    }
    void posted(Handle host) { m_host = std::move(host); }
    void wait() override
    {
        m_host.wait();
        if (m_raw)
            m_backend.uploadBytes(m_target.data, m_staging.data(), m_target.bytes());
        else
            m_backend.upload(
                m_target.data, m_target.dtype, reinterpret_cast<const float*>(m_staging.data()), m_target.count);
        m_pool.give(std::move(m_staging));
    }

private:
    Backend& m_backend;
    Region m_target;
    StagingPool& m_pool;
    std::vector<std::byte> m_staging; ///< where the host transport writes; lives as long as the operation
    bool m_raw;
    Handle m_host;
};

class HostStagedTransport final : public Transport
{
public:
    HostStagedTransport(Transport& host, Backend& backend)
        : m_host(host)
        , m_backend(backend)
    {
    }

    void makeGroups(const std::vector<std::vector<int>>& groups) override { m_host.makeGroups(groups); }
    Handle send(int peer, std::uint64_t tag, Region data) override
    {
        if (direct(data))
            return m_host.send(peer, tag, data);
        // The host transport copies what it posts, so the staging goes back to the pool at once.
        std::vector<std::byte> staging = m_pool.take(data.bytes());
        m_backend.downloadBytes(staging.data(), data.data, data.bytes());
        Handle h = m_host.send(peer, tag, {staging.data(), data.dtype, data.count});
        m_pool.give(std::move(staging));
        return h;
    }
    Handle recv(int peer, std::uint64_t tag, Region data) override
    {
        if (direct(data))
            return m_host.recv(peer, tag, data);
        auto work = std::make_unique<Upload>(m_backend, data, m_pool, m_pool.take(data.bytes()), true);
        work->posted(m_host.recv(peer, tag, work->staged()));
        return Handle(std::move(work));
    }
    std::vector<Handle> exchange(std::span<const Transfer> transfers) override
    {
        std::vector<Transfer> staged(transfers.begin(), transfers.end());
        std::vector<std::unique_ptr<Upload>> uploads(transfers.size());
        std::vector<std::vector<std::byte>> sends;
        sends.reserve(transfers.size()); // the staged sends' addresses stay put until the host has copied them
        for (std::size_t i = 0; i < transfers.size(); ++i) {
            const Region r = transfers[i].region;
            if (direct(r))
                continue;
            if (transfers[i].direction == Transfer::Direction::Recv) {
                uploads[i] = std::make_unique<Upload>(m_backend, r, m_pool, m_pool.take(r.bytes()), true);
                staged[i].region = uploads[i]->staged();
            } else {
                auto& host = sends.emplace_back(m_pool.take(r.bytes()));
                m_backend.downloadBytes(host.data(), r.data, r.bytes());
                staged[i].region = {host.data(), r.dtype, r.count};
            }
        }
        auto handles = m_host.exchange(staged);
        for (auto& host : sends) // copied by the host transport when posted
            m_pool.give(std::move(host));
        for (std::size_t i = 0; i < handles.size(); ++i)
            if (uploads[i]) {
                uploads[i]->posted(std::move(handles[i]));
                handles[i] = Handle(std::move(uploads[i]));
            }
        return handles;
    }
    Handle allReduceSum(const std::vector<int>& group, Region data) override
    {
        if (direct(data))
            return m_host.allReduceSum(group, data);
        // Summed in fp32 on the host (one rounding back to the region's type), as a GPU's all-reduce does.
        std::vector<std::byte> staging = m_pool.take(data.count * sizeof(float));
        m_backend.download(reinterpret_cast<float*>(staging.data()), data.data, data.dtype, data.count);
        auto work = std::make_unique<Upload>(m_backend, data, m_pool, std::move(staging), false);
        work->posted(m_host.allReduceSum(group, work->staged()));
        return Handle(std::move(work));
    }
    void flush() override { m_host.flush(); }
    bool reaches(const Backend& backend) const override { return &backend == &m_backend; }
    Completion completion() const override { return Completion::Host; }

private:
    bool direct(const Region& r) const { return m_backend.hostAddressable() && r.dtype == DType::F32; }

    Transport& m_host;
    Backend& m_backend;
    StagingPool m_pool; ///< outlives its operations: a handle is waited for (or flushed) before the transport ends
};

} // namespace

std::unique_ptr<Transport> throughHost(Transport& host, Backend& backend)
{
    return std::make_unique<HostStagedTransport>(host, backend);
}

} // namespace pw::engine
