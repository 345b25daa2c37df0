// SPDX-License-Identifier: MIT
// Gloo over TCP. Transfers use unbound buffers on one full-mesh context (slot = transferTag); each all-reduce
// group gets a context of its own, so collectives never share slots with transfers.
#include <deque>
#include <map>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "transport.h"

namespace pw::engine {

namespace {

std::string groupKey(const std::vector<int>& devices)
{
    std::string key = "group";
    for (int d : devices)
        key += "-" + std::to_string(d);
    return key;
}

class GlooTransport final : public Transport
{
public:
    GlooTransport(int device, int devices, std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options)
        : m_device(device)
        , m_store(std::move(store))
        , m_options(options)
    {
        gloo::transport::tcp::attr attr;
        if (!options.iface.empty())
            attr.iface = options.iface;
        else
            attr.hostname = options.hostname;
        try {
            m_dev = gloo::transport::tcp::CreateDevice(attr);
            m_mesh = connect(device, devices, "mesh");
        } catch (const std::exception& e) {
            throw TransportError("device " + std::to_string(device) + ": Gloo rendezvous failed: " + e.what());
        }
    }

    ~GlooTransport() override
    {
        try {
            flush();
        } catch (...) { // a failed run: the peers are gone, nothing left to deliver
        }
    }

    void send(int peer, std::uint64_t tag, std::span<const float> data) override
    {
        Pending p;
        p.data.assign(data.begin(), data.end());
        p.buffer = m_mesh->createUnboundBuffer(p.data.data(), p.data.size() * sizeof(float));
        guard("send to device " + std::to_string(peer), [&] { p.buffer->send(peer, tag); });
        m_pending.push_back(std::move(p));
        // Keep a bounded number in flight: the oldest send is done long before the queue fills.
        while (m_pending.size() > 64)
            waitOldest();
    }

    void recv(int peer, std::uint64_t tag, std::span<float> data) override
    {
        auto buffer = m_mesh->createUnboundBuffer(data.data(), data.size() * sizeof(float));
        guard("receive from device " + std::to_string(peer), [&] {
            buffer->recv(peer, tag);
            if (!buffer->waitRecv(m_options.timeout))
                throw TransportError("aborted");
        });
    }

    void allReduceSum(const std::vector<int>& devices, std::span<float> data) override
    {
        auto& ctx = m_groups[devices];
        if (!ctx) {
            const auto it = std::find(devices.begin(), devices.end(), m_device);
            if (it == devices.end())
                throw TransportError("device " + std::to_string(m_device) + " is not in " + groupKey(devices));
            ctx = connect(static_cast<int>(it - devices.begin()), static_cast<int>(devices.size()), groupKey(devices));
        }
        guard("all-reduce in " + groupKey(devices), [&] {
            gloo::AllreduceOptions opts(ctx);
            opts.setOutput(data.data(), data.size());
            opts.setReduceFunction(
                static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
            opts.setTimeout(m_options.timeout);
            gloo::allreduce(opts);
        });
    }

    void flush() override
    {
        while (!m_pending.empty())
            waitOldest();
    }

private:
    struct Pending
    {
        std::vector<float> data;
        std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    };

    std::shared_ptr<gloo::Context> connect(int rank, int size, const std::string& name)
    {
        auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
        ctx->setTimeout(m_options.timeout);
        gloo::rendezvous::PrefixStore prefixed(m_options.prefix + "/" + name, *m_store);
        ctx->connectFullMesh(prefixed, m_dev);
        return ctx;
    }

    void waitOldest()
    {
        auto p = std::move(m_pending.front());
        m_pending.pop_front();
        guard("send", [&] {
            if (!p.buffer->waitSend(m_options.timeout))
                throw TransportError("aborted");
        });
    }

    template <class F> void guard(const std::string& what, F&& f)
    {
        try {
            f();
        } catch (const TransportError&) {
            throw;
        } catch (const std::exception& e) {
            throw TransportError("device " + std::to_string(m_device) + ": " + what + " failed: " + e.what());
        }
    }

    int m_device;
    std::shared_ptr<gloo::rendezvous::Store> m_store;
    GlooOptions m_options;
    std::shared_ptr<gloo::transport::Device> m_dev;
    std::shared_ptr<gloo::Context> m_mesh;
    std::map<std::vector<int>, std::shared_ptr<gloo::Context>> m_groups;
    std::deque<Pending> m_pending;
};

} // namespace

std::unique_ptr<Transport> makeGlooTransport(
    int device, int devices, std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options)
{
    return std::make_unique<GlooTransport>(device, devices, std::move(store), options);
}

} // namespace pw::engine
