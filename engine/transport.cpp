// SPDX-License-Identifier: MIT
// What every transport shares: the tags, the default grouped exchange, and the host staging of a backend's memory
// for the transports that carry fp32 host memory (throughHost).
#include "transport.h"

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

/// A receive or an all-reduce through host memory: the host operation's handle, then the upload of its result.
class Upload final : public Handle::Work
{
public:
    Upload(Backend& backend, Region target, std::vector<float> staging)
        : m_backend(backend)
        , m_target(target)
        , m_staging(std::move(staging))
    {
    }
    Region staged() { return {m_staging.data(), DType::F32, m_staging.size()}; }
    void posted(Handle host) { m_host = std::move(host); }
    void wait() override
    {
        m_host.wait();
        m_backend.upload(m_target.data, m_target.dtype, m_staging.data(), m_staging.size());
    }

private:
    Backend& m_backend;
    Region m_target;
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
        auto work = std::make_unique<Upload>(m_backend, data, std::vector<float>(data.count));
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
                uploads[i] = std::make_unique<Upload>(m_backend, r, std::vector<float>(r.count));
                staged[i].region = uploads[i]->staged();
            } else {
                auto& host = sends.emplace_back(r.count);
                m_backend.download(host.data(), r.data, r.dtype, r.count);
                staged[i].region = {host.data(), DType::F32, r.count};
            }
        }
        auto handles = m_host.exchange(staged);
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
        std::vector<float> staging(data.count);
        m_backend.download(staging.data(), data.data, data.dtype, data.count);
        auto work = std::make_unique<Upload>(m_backend, data, std::move(staging));
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
};

} // namespace

std::unique_ptr<Transport> throughHost(Transport& host, Backend& backend)
{
    return std::make_unique<HostStagedTransport>(host, backend);
}

} // namespace pw::engine
