// SPDX-License-Identifier: MIT
// The NCCL transport of engine/cuda/nccl_transport.h: communicators, the three streams, the send copies and the
// watchdog that turns a dead peer into a TransportError.
#include "nccl_transport.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <type_traits>

#include <cuda_runtime.h>
#include <nccl.h>

#include "cuda_backend.h"
#include "cuda_util.h"
#include "planner/runtime_library.h"

namespace pw::engine {

namespace {

using Clock = std::chrono::steady_clock;

std::string listText(const std::vector<int>& devices)
{
    std::string out = "{";
    for (std::size_t i = 0; i < devices.size(); ++i)
        out += (i ? ", " : "") + std::to_string(devices[i]);
    return out + "}";
}

ncclDataType_t ncclType(DType t)
{
    switch (t) {
    case DType::F32:
        return ncclFloat32;
    case DType::BF16:
        return ncclBfloat16;
    case DType::I32:
        return ncclInt32;
    }
    return ncclFloat32;
}

/// @brief NCCL's entry points, looked up in libnccl.so.2 at run time: an agent built with CUDA must start where
/// there is no NCCL (one GPU, or a node whose GPUs train through the host), as engine/devices.cpp's probe does.
struct NcclApi
{
    decltype(&::ncclGetErrorString) getErrorString = nullptr;
    decltype(&::ncclGetLastError) getLastError = nullptr;
    decltype(&::ncclGetUniqueId) getUniqueId = nullptr;
    decltype(&::ncclCommInitRankConfig) commInitRankConfig = nullptr;
    decltype(&::ncclCommSplit) commSplit = nullptr;
    decltype(&::ncclCommGetAsyncError) commGetAsyncError = nullptr;
    decltype(&::ncclCommAbort) commAbort = nullptr;
    decltype(&::ncclGroupStart) groupStart = nullptr;
    decltype(&::ncclGroupEnd) groupEnd = nullptr;
    decltype(&::ncclSend) send = nullptr;
    decltype(&::ncclRecv) recv = nullptr;
    decltype(&::ncclAllReduce) allReduce = nullptr;
};

/// The process's NCCL (loaded once, never unloaded); throws TransportError saying what is missing.
const NcclApi& ncclApi()
{
    static const std::pair<NcclApi, std::string> loaded = [] {
        planner::RuntimeLibrary lib("libnccl.so.2",
            "install NCCL on the node, or put its lib folder in LD_LIBRARY_PATH through the node's env",
            "NCCL 2.18 or newer is needed");
        NcclApi a;
        const auto find = [&](auto& fn, const char* name) { lib.find(fn, name); };
        find(a.getErrorString, "ncclGetErrorString");
        find(a.getLastError, "ncclGetLastError");
        find(a.getUniqueId, "ncclGetUniqueId");
        find(a.commInitRankConfig, "ncclCommInitRankConfig");
        find(a.commSplit, "ncclCommSplit");
        find(a.commGetAsyncError, "ncclCommGetAsyncError");
        find(a.commAbort, "ncclCommAbort");
        find(a.groupStart, "ncclGroupStart");
        find(a.groupEnd, "ncclGroupEnd");
        find(a.send, "ncclSend");
        find(a.recv, "ncclRecv");
        find(a.allReduce, "ncclAllReduce");
        return std::pair {a, lib.error()};
    }();
    if (!loaded.second.empty())
        throw TransportError(loaded.second);
    return loaded.first;
}

/// A posted operation: the event recorded after it on its stream, and what it was (for the error that names it).
struct Op
{
    cudaEvent_t event = nullptr;
    Clock::time_point posted;
    std::string what;
    void* staging = nullptr; ///< a send's copy of its region, released once the event has completed
    std::size_t stagingBytes = 0;
    bool send = false;
    std::atomic<bool> done {false};

    ~Op()
    {
        if (event)
            cudaEventDestroy(event);
    }
};

class NcclTransport final : public Transport
{
public:
    NcclTransport(
        int device, std::vector<int> devices, Rendezvous& store, std::shared_ptr<Backend> backend, NcclOptions options)
        : m_nccl(ncclApi())
        , m_device(device)
        , m_devices(std::move(devices))
        , m_store(store)
        , m_backend(std::move(backend))
        , m_options(std::move(options))
    {
        const CudaPlace place = cudaPlace(*m_backend);
        if (place.device < 0)
            throw TransportError("device " + std::to_string(device) + ": the NCCL transport needs a CUDA backend, not "
                + m_backend->name());
        if (!std::is_sorted(m_devices.begin(), m_devices.end())
            || std::adjacent_find(m_devices.begin(), m_devices.end()) != m_devices.end()
            || !std::binary_search(m_devices.begin(), m_devices.end(), device))
            throw TransportError("device " + std::to_string(device) + " is not among the run's devices ("
                + listText(m_devices) + ", ascending, each once)");
        m_rank = rankOf(device);
        m_gpu = place.device;
        m_compute = static_cast<cudaStream_t>(place.stream);
        activate();
        for (cudaStream_t* s : {&m_up, &m_down, &m_collective})
            PW_CUDA(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
        PW_CUDA(cudaEventCreateWithFlags(&m_ready, cudaEventDisableTiming));
        m_watchdog = std::thread([this] { watch(); });
    }

    ~NcclTransport() override
    {
        {
            std::lock_guard lock(m_mutex);
            m_stopping = true;
        }
        m_wake.notify_all();
        m_watchdog.join();
        if (cudaSetDevice(m_gpu) != cudaSuccess)
            return;
        // A run that ended well has nothing in flight (its receives were waited for, flush() saw its sends out), so
        // aborting frees the communicators without another rendezvous; a stopped or failed one may have operations
        // whose peer never comes, which the abort ends (their kernels return) so that the streams drain.
        abortAll();
        for (cudaStream_t s : {m_up, m_down, m_collective})
            cudaStreamSynchronize(s);
        for (auto& op : m_pending)
            if (op->staging)
                m_backend->release(op->staging, op->stagingBytes);
        m_pending.clear();
        for (cudaStream_t s : {m_up, m_down, m_collective})
            cudaStreamDestroy(s);
        cudaEventDestroy(m_ready);
    }

    void makeGroups(const std::vector<std::vector<int>>& groups) override
    {
        activate();
        std::lock_guard lock(m_mutex);
        throwIfFailed();
        if (!m_world)
            makeWorld();
        for (std::size_t g = 0; g < groups.size(); ++g) {
            const auto& members = groups[g];
            if (m_groups.count(members))
                continue;
            const bool member = std::find(members.begin(), members.end(), m_device) != members.end();
            ncclConfig_t config = nonBlocking();
            ncclComm_t comm = nullptr;
            const std::string what = "making the communicator of group " + listText(members) + " (ncclCommSplit)";
            check(m_nccl.commSplit(m_world, member ? static_cast<int>(g) : NCCL_SPLIT_NOCOLOR, m_rank, &comm, &config),
                m_world, what);
            // A non-blocking split leaves the parent in progress too: both must settle before either is used.
            settle(m_world, what);
            settle(comm, what);
            if (member)
                m_groups[members] = comm;
        }
    }

    Handle send(int peer, std::uint64_t tag, Region data) override
    {
        Transfer t {Transfer::Direction::Send, peer, tag, data};
        return std::move(exchange(std::span<const Transfer>(&t, 1)).front());
    }

    Handle recv(int peer, std::uint64_t tag, Region data) override
    {
        Transfer t {Transfer::Direction::Recv, peer, tag, data};
        return std::move(exchange(std::span<const Transfer>(&t, 1)).front());
    }

    std::vector<Handle> exchange(std::span<const Transfer> transfers) override
    {
        activate();
        std::unique_lock lock(m_mutex);
        reap();
        throwIfFailed();
        requireWorld();
        std::vector<Handle> handles(transfers.size());
        if (transfers.empty())
            return handles;
        // Each send's region copied on the backend's stream: the backend may reuse it at once.
        std::vector<void*> staging(transfers.size(), nullptr);
        for (std::size_t i = 0; i < transfers.size(); ++i) {
            const Transfer& t = transfers[i];
            if (!std::binary_search(m_devices.begin(), m_devices.end(), t.peer))
                throw TransportError("device " + std::to_string(m_device) + ": no device " + std::to_string(t.peer)
                    + " among the run's (" + listText(m_devices) + ")");
            if (t.direction == Transfer::Direction::Send && t.region.bytes() > 0) {
                staging[i] = m_backend->allocate(t.region.bytes());
                PW_CUDA(
                    cudaMemcpyAsync(staging[i], t.region.data, t.region.bytes(), cudaMemcpyDeviceToDevice, m_compute));
            }
        }
        // Receives overwrite regions that work before them on the backend's stream may still use.
        PW_CUDA(cudaEventRecord(m_ready, m_compute));
        PW_CUDA(cudaStreamWaitEvent(m_up, m_ready, 0));
        PW_CUDA(cudaStreamWaitEvent(m_down, m_ready, 0));
        std::string what;
        for (const Transfer& t : transfers)
            what += (what.empty() ? "" : ", ") + describe(t);
        check(m_nccl.groupStart(), nullptr, what);
        for (std::size_t i = 0; i < transfers.size(); ++i) {
            const Transfer& t = transfers[i];
            const bool sending = t.direction == Transfer::Direction::Send;
            // Lower to higher (or to itself) on the world communicator, higher to lower on its twin.
            const bool upward = sending ? m_device <= t.peer : t.peer <= m_device;
            ncclComm_t comm = upward ? m_world : m_twin;
            cudaStream_t stream = upward ? m_up : m_down;
            if (sending)
                check(m_nccl.send(staging[i], t.region.count, ncclType(t.region.dtype), rankOf(t.peer), comm, stream),
                    comm, describe(t));
            else
                check(
                    m_nccl.recv(t.region.data, t.region.count, ncclType(t.region.dtype), rankOf(t.peer), comm, stream),
                    comm, describe(t));
        }
        const ncclResult_t ended = m_nccl.groupEnd();
        if (ended != ncclInProgress)
            check(ended, nullptr, what);
        settle(m_world, what);
        settle(m_twin, what);
        for (std::size_t i = 0; i < transfers.size(); ++i) {
            const Transfer& t = transfers[i];
            const bool sending = t.direction == Transfer::Direction::Send;
            const bool upward = sending ? m_device <= t.peer : t.peer <= m_device;
            auto op = post(upward ? m_up : m_down, describe(t));
            op->send = sending;
            op->staging = staging[i];
            op->stagingBytes = t.region.bytes();
            if (!sending)
                handles[i] = Handle(std::make_unique<Wait>(*this, std::move(op)));
        }
        return handles;
    }

    Handle allReduceSum(const std::vector<int>& group, Region data) override
    {
        activate();
        std::lock_guard lock(m_mutex);
        reap();
        throwIfFailed();
        auto it = m_groups.find(group);
        if (it == m_groups.end())
            throw TransportError("device " + std::to_string(m_device) + ": all-reduce over group " + listText(group)
                + ", which makeGroups did not make");
        const std::string what
            = "all-reduce of " + std::to_string(data.bytes()) + " bytes over group " + listText(group);
        PW_CUDA(cudaEventRecord(m_ready, m_compute));
        PW_CUDA(cudaStreamWaitEvent(m_collective, m_ready, 0));
        const ncclResult_t r = m_nccl.allReduce(
            data.data, data.data, data.count, ncclType(data.dtype), ncclSum, it->second, m_collective);
        if (r != ncclInProgress)
            check(r, it->second, what);
        settle(it->second, what);
        return Handle(std::make_unique<Wait>(*this, post(m_collective, what)));
    }

    void flush() override
    {
        activate();
        for (;;) {
            {
                std::lock_guard lock(m_mutex);
                reap();
                throwIfFailed();
                if (std::none_of(m_pending.begin(), m_pending.end(), [](const auto& op) { return op->send; }))
                    return;
            }
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    }

    bool reaches(const Backend& backend) const override { return &backend == m_backend.get(); }
    Completion completion() const override { return Completion::Stream; }

private:
    /// A receive's or an all-reduce's handle: the backend's stream waits for the operation's event.
    class Wait final : public Handle::Work
    {
    public:
        Wait(NcclTransport& t, std::shared_ptr<Op> op)
            : m_transport(t)
            , m_op(std::move(op))
        {
        }
        void wait() override
        {
            std::lock_guard lock(m_transport.m_mutex);
            m_transport.throwIfFailed();
            m_transport.activate();
            PW_CUDA(cudaStreamWaitEvent(m_transport.m_compute, m_op->event, 0));
        }

    private:
        NcclTransport& m_transport;
        std::shared_ptr<Op> m_op;
    };

    void activate() const
    {
        int current = -1;
        PW_CUDA(cudaGetDevice(&current));
        if (current != m_gpu)
            PW_CUDA(cudaSetDevice(m_gpu));
    }

    static ncclConfig_t nonBlocking()
    {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        return config;
    }

    std::string describe(const Transfer& t) const
    {
        return t.direction == Transfer::Direction::Send
            ? "send of " + std::to_string(t.region.bytes()) + " bytes to device " + std::to_string(t.peer)
            : "receive of " + std::to_string(t.region.bytes()) + " bytes from device " + std::to_string(t.peer);
    }

    /// NCCL's words for `r`, with the library's last message about `comm`.
    std::string ncclText(ncclResult_t r, ncclComm_t comm)
    {
        std::string out = m_nccl.getErrorString(r);
        const char* last = m_nccl.getLastError(comm);
        if (last && *last)
            out += std::string(" (") + last + ")";
        return out;
    }

    void check(ncclResult_t r, ncclComm_t comm, const std::string& what)
    {
        if (r == ncclSuccess || r == ncclInProgress)
            return;
        fail("device " + std::to_string(m_device) + " (cuda:" + std::to_string(m_gpu) + "): " + what + " failed: NCCL "
            + ncclText(r, comm));
        throwIfFailed();
    }

    /// Waits, bounded by the timeout, until a non-blocking communicator has finished enqueuing (or creating).
    void settle(ncclComm_t comm, const std::string& what)
    {
        if (!comm)
            return;
        const auto deadline = Clock::now() + m_options.timeout;
        for (;;) {
            ncclResult_t state = ncclSuccess;
            const ncclResult_t r = m_nccl.commGetAsyncError(comm, &state);
            if (r != ncclSuccess)
                state = r;
            if (state == ncclSuccess)
                return;
            if (state != ncclInProgress) {
                check(state, comm, what);
                return;
            }
            if (Clock::now() > deadline) {
                fail("device " + std::to_string(m_device) + " (cuda:" + std::to_string(m_gpu) + "): " + what
                    + " did not complete within " + std::to_string(m_options.timeout.count() / 1000)
                    + " s (is another device of the run gone?)");
                throwIfFailed();
            }
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    }

    /// The communicators' rank of device `device` (its place among the run's devices; checked by the caller).
    int rankOf(int device) const
    {
        return static_cast<int>(std::lower_bound(m_devices.begin(), m_devices.end(), device) - m_devices.begin());
    }

    /// The world communicator from the first device's unique id, and its twin.
    void makeWorld()
    {
        const std::string key = m_options.prefix + "/nccl/id";
        ncclUniqueId id {};
        if (m_rank == 0) { // the run's first device publishes the id
            check(m_nccl.getUniqueId(&id), nullptr, "making the run's NCCL unique id");
            m_store.set(key, std::vector<std::uint8_t>(id.internal, id.internal + sizeof(id.internal)));
        } else {
            std::vector<std::uint8_t> bytes;
            try {
                bytes = m_store.get(key, m_options.timeout);
            } catch (const std::exception& e) {
                throw TransportError("device " + std::to_string(m_device) + ": no NCCL id from device "
                    + std::to_string(m_devices.front()) + ": " + e.what());
            }
            if (bytes.size() != sizeof(id.internal))
                throw TransportError("device " + std::to_string(m_device) + ": the NCCL id under '" + key + "' has "
                    + std::to_string(bytes.size()) + " bytes, not " + std::to_string(sizeof(id.internal)));
            std::memcpy(id.internal, bytes.data(), bytes.size());
        }
        ncclConfig_t config = nonBlocking();
        const std::string what = "joining the run's NCCL communicator of " + std::to_string(m_devices.size())
            + " devices (ncclCommInitRank)";
        check(m_nccl.commInitRankConfig(&m_world, static_cast<int>(m_devices.size()), id, m_rank, &config), m_world,
            what);
        settle(m_world, what);
        ncclConfig_t twin = nonBlocking();
        check(m_nccl.commSplit(m_world, 0, m_rank, &m_twin, &twin), m_world, "making the twin communicator");
        settle(m_world, "making the twin communicator");
        settle(m_twin, "making the twin communicator");
    }

    void requireWorld() const
    {
        if (!m_world)
            throw TransportError("device " + std::to_string(m_device)
                + ": the NCCL transport's communicators are made by makeGroups, before the first transfer");
    }

    std::shared_ptr<Op> post(cudaStream_t stream, std::string what)
    {
        auto op = std::make_shared<Op>();
        PW_CUDA(cudaEventCreateWithFlags(&op->event, cudaEventDisableTiming));
        PW_CUDA(cudaEventRecord(op->event, stream));
        op->posted = Clock::now();
        op->what = "device " + std::to_string(m_device) + " (cuda:" + std::to_string(m_gpu) + "): " + what;
        m_pending.push_back(op);
        return op;
    }

    /// Forgets finished operations and releases their send copies (on the caller's thread: the backend's arena
    /// is the executor's).
    void reap()
    {
        for (auto it = m_pending.begin(); it != m_pending.end();) {
            if (!(*it)->done.load()) {
                if (cudaEventQuery((*it)->event) == cudaSuccess)
                    (*it)->done = true;
                else
                    (void)cudaGetLastError(); // "not ready" is an answer; a failure is the watchdog's to report
            }
            if (!(*it)->done.load()) {
                ++it;
                continue;
            }
            if ((*it)->staging)
                m_backend->release((*it)->staging, (*it)->stagingBytes);
            it = m_pending.erase(it);
        }
    }

    void fail(const std::string& why)
    {
        if (m_error.empty())
            m_error = why;
        abortAll();
    }

    void throwIfFailed() const
    {
        if (!m_error.empty())
            throw TransportError(m_error);
    }

    std::vector<ncclComm_t> allComms() const
    {
        std::vector<ncclComm_t> out;
        for (ncclComm_t c : {m_world, m_twin})
            if (c)
                out.push_back(c);
        for (const auto& [group, c] : m_groups)
            if (c)
                out.push_back(c);
        return out;
    }

    /// Every communicator aborted (their kernels return, the streams drain); the transport is unusable after.
    void abortAll()
    {
        for (ncclComm_t comm : allComms())
            m_nccl.commAbort(comm);
        m_world = m_twin = nullptr;
        m_groups.clear();
    }

    /// The watchdog: polls the posted operations and the communicators' asynchronous errors; an operation older
    /// than the timeout, or an error, fails the transport and aborts its communicators.
    void watch()
    {
        if (cudaSetDevice(m_gpu) != cudaSuccess)
            return;
        std::unique_lock lock(m_mutex);
        while (!m_stopping) {
            m_wake.wait_for(lock, std::chrono::milliseconds(20));
            if (m_stopping || !m_error.empty())
                continue;
            const auto now = Clock::now();
            for (const auto& op : m_pending) {
                if (op->done.load())
                    continue;
                const cudaError_t status = cudaEventQuery(op->event);
                if (status == cudaSuccess) {
                    op->done = true;
                    continue;
                }
                if (status != cudaErrorNotReady) {
                    fail(op->what + " failed: CUDA " + cudaGetErrorString(status));
                    break;
                }
                (void)cudaGetLastError();
                if (now - op->posted > m_options.timeout) {
                    fail(op->what + " did not complete within " + std::to_string(m_options.timeout.count() / 1000)
                        + " s: its peer stopped or never posted the matching operation");
                    break;
                }
            }
            if (!m_error.empty())
                continue;
            for (ncclComm_t comm : allComms()) {
                ncclResult_t state = ncclSuccess;
                if (m_nccl.commGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess
                    && state != ncclInProgress) {
                    fail("device " + std::to_string(m_device) + " (cuda:" + std::to_string(m_gpu) + "): NCCL reported "
                        + ncclText(state, comm));
                    break;
                }
            }
        }
    }

    const NcclApi& m_nccl;
    int m_device;
    std::vector<int> m_devices; ///< the run's devices, ascending: device m_devices[r] is rank r of the communicators
    int m_rank = 0; ///< m_device's rank
    Rendezvous& m_store;
    std::shared_ptr<Backend> m_backend;
    NcclOptions m_options;
    int m_gpu = -1;
    cudaStream_t m_compute = nullptr; ///< the backend's
    cudaStream_t m_up = nullptr, m_down = nullptr, m_collective = nullptr;
    cudaEvent_t m_ready = nullptr; ///< the backend's stream at a posting
    ncclComm_t m_world = nullptr, m_twin = nullptr;
    std::map<std::vector<int>, ncclComm_t> m_groups;
    /// Guards the communicators, the pending operations and the error: the watchdog aborts under it, so no
    /// NCCL call of the executor's thread ever uses a freed communicator.
    mutable std::mutex m_mutex;
    std::condition_variable m_wake;
    std::deque<std::shared_ptr<Op>> m_pending;
    std::string m_error;
    bool m_stopping = false;
    std::thread m_watchdog;
};

} // namespace

bool ncclCompiledIn()
{
    return true;
}

std::unique_ptr<Transport> makeNcclTransport(int device, std::vector<int> devices, Rendezvous& store,
    std::shared_ptr<Backend> backend, const NcclOptions& options)
{
    if (!backend)
        throw TransportError("device " + std::to_string(device) + ": the NCCL transport needs a CUDA backend");
    return std::make_unique<NcclTransport>(device, std::move(devices), store, std::move(backend), options);
}

std::unique_ptr<Transport> makeNcclTransport(
    int device, int devices, Rendezvous& store, std::shared_ptr<Backend> backend, const NcclOptions& options)
{
    std::vector<int> all(static_cast<std::size_t>(std::max(0, devices)));
    std::iota(all.begin(), all.end(), 0);
    return makeNcclTransport(device, std::move(all), store, std::move(backend), options);
}

} // namespace pw::engine
