// SPDX-License-Identifier: MIT
#include "device_transport.h"

namespace pw::engine {

namespace {

class HostStagedTransport final : public DeviceTransport
{
public:
    HostStagedTransport(Transport& host, Backend& backend)
        : m_host(host)
        , m_backend(backend)
    {
    }

    void send(int peer, std::uint64_t tag, const void* data, DType dtype, std::size_t count) override
    {
        if (direct(dtype)) {
            m_host.send(peer, tag, {static_cast<const float*>(data), count});
            return;
        }
        m_staging.resize(count);
        m_backend.download(m_staging.data(), data, dtype, count);
        m_host.send(peer, tag, m_staging); // the transport copies what it posts
    }
    void recv(int peer, std::uint64_t tag, void* data, DType dtype, std::size_t count) override
    {
        if (direct(dtype)) {
            m_host.recv(peer, tag, {static_cast<float*>(data), count});
            return;
        }
        m_staging.resize(count);
        m_host.recv(peer, tag, m_staging);
        m_backend.upload(data, dtype, m_staging.data(), count);
    }
    void allReduceSum(const std::vector<int>& devices, void* data, DType dtype, std::size_t count) override
    {
        if (direct(dtype)) {
            m_host.allReduceSum(devices, {static_cast<float*>(data), count});
            return;
        }
        m_staging.resize(count);
        m_backend.download(m_staging.data(), data, dtype, count);
        m_host.allReduceSum(devices, m_staging);
        m_backend.upload(data, dtype, m_staging.data(), count);
    }
    void flush() override { m_host.flush(); }

private:
    bool direct(DType dtype) const { return m_backend.hostAddressable() && dtype == DType::F32; }

    Transport& m_host;
    Backend& m_backend;
    std::vector<float> m_staging;
};

} // namespace

std::unique_ptr<DeviceTransport> throughHost(Transport& host, Backend& backend)
{
    return std::make_unique<HostStagedTransport>(host, backend);
}

} // namespace pw::engine
