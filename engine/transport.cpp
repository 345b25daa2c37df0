// SPDX-License-Identifier: MIT
// What every transport shares: the tags, the default grouped exchange, and the host staging of a backend's memory
// for the transports that carry fp32 host memory (throughHost).
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

/// Host staging vectors, kept for reuse: a transfer takes one of its size and gives it back when its operation is
/// done, so that after the first step the host staging allocates nothing.
class StagingPool
{
public:
    std::vector<float> take(std::size_t count)
    {
        std::lock_guard lock(m_mutex);
        if (auto it = m_free.find(count); it != m_free.end()) {
            std::vector<float> v = std::move(it->second);
            m_free.erase(it);
            return v;
        }
        return std::vector<float>(count);
    }
    void give(std::vector<float> v)
    {
        std::lock_guard lock(m_mutex);
        m_free.emplace(v.size(), std::move(v));
    }

private:
    std::mutex m_mutex;
    std::multimap<std::size_t, std::vector<float>> m_free;
};

/// A receive or an all-reduce through host memory: the host operation's handle, then the upload of its result.
class Upload final : public Handle::Work
{
public:
    Upload(Backend& backend, Region target, StagingPool& pool, std::vector<float> staging)
        : m_backend(backend)
        , m_target(target)
        , m_pool(pool)
        , m_staging(std::move(staging))
    {
    }
    Region staged() { return {m_staging.data(), DType::F32, m_staging.size()}; }
    void posted(Handle host) { m_host = std::move(host); }
    void wait() override
    {
        m_host.wait();
        m_backend.upload(m_target.data, m_target.dtype, m_staging.data(), m_staging.size());
        m_pool.give(std::move(m_staging));
    }

private:
    Backend& m_backend;
    Region m_target;
    StagingPool& m_pool;
    std::vector<float> m_staging; ///< where the host transport writes; lives as long as the operation
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
        // The host transport copies what it posts, so one staging vector serves every send.
        m_staging.resize(data.count);
        m_backend.download(m_staging.data(), data.data, data.dtype, data.count);
        return m_host.send(peer, tag, {m_staging.data(), DType::F32, data.count});
    }
    Handle recv(int peer, std::uint64_t tag, Region data) override
    {
        if (direct(data))
            return m_host.recv(peer, tag, data);
        auto work = std::make_unique<Upload>(m_backend, data, m_pool, m_pool.take(data.count));
        work->posted(m_host.recv(peer, tag, work->staged()));
        return Handle(std::move(work));
    }
    std::vector<Handle> exchange(std::span<const Transfer> transfers) override
    {
        std::vector<Transfer> staged(transfers.begin(), transfers.end());
        std::vector<std::unique_ptr<Upload>> uploads(transfers.size());
        std::vector<std::vector<float>> sends;
        sends.reserve(transfers.size()); // the staged sends' addresses stay put until the host has copied them
        for (std::size_t i = 0; i < transfers.size(); ++i) {
            const Region r = transfers[i].region;
            if (direct(r))
                continue;
            if (transfers[i].direction == Transfer::Direction::Recv) {
                uploads[i] = std::make_unique<Upload>(m_backend, r, m_pool, m_pool.take(r.count));
                staged[i].region = uploads[i]->staged();
            } else {
                auto& host = sends.emplace_back(m_pool.take(r.count));
                m_backend.download(host.data(), r.data, r.dtype, r.count);
                staged[i].region = {host.data(), DType::F32, r.count};
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
        std::vector<float> staging = m_pool.take(data.count);
        m_backend.download(staging.data(), data.data, data.dtype, data.count);
        auto work = std::make_unique<Upload>(m_backend, data, m_pool, std::move(staging));
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
    std::vector<float> m_staging;
    StagingPool m_pool; ///< outlives its operations: a handle is waited for (or flushed) before the transport ends
};

} // namespace

std::unique_ptr<Transport> throughHost(Transport& host, Backend& backend)
{
    return std::make_unique<HostStagedTransport>(host, backend);
}

} // namespace pw::engine
