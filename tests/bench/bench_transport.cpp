// SPDX-License-Identifier: MIT
// The transport's bandwidth per message size, printed as nccl-tests prints it: size, count, type, time per
// operation, algorithm bandwidth (size / time) and bus bandwidth (what each link carries: equal to the algorithm
// bandwidth for a send/receive, x 2(n-1)/n for a ring all-reduce of n members). Gloo over TCP between devices on
// threads of this process (real sockets on 127.0.0.1, the proven pairs a run uses), for a send/receive between two
// devices (both directions at once, one grouped exchange each, as 1F1B's send-forward-receive-backward) and an
// all-reduce among 2 and 4. The baseline, measured in the same run: plain TCP sockets between two threads over the
// same loopback, each sending its buffer to the other at the same time (what any transport over TCP can reach here);
// the ratio column is the transport's bus bandwidth over it.
// With --nccl, the NCCL transport (engine/cuda/nccl_transport.h) on the GPUs instead, same columns: a send and
// receive to itself and an all-reduce on one GPU (a one-rank communicator: the transport's own cost), and between
// GPUs 0 and 1 a send/receive both ways and an all-reduce among all visible GPUs (skipped, saying so, with fewer
// than two); the baseline is a device-to-device copy of the same size on GPU 0 (cudaMemcpyAsync through the
// backend), its ratio the transport's bus bandwidth over it.
//   bench_transport [--nccl] [--max-bytes N] [--iters N]
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gloo/rendezvous/hash_store.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/cuda/nccl_transport.h"
#include "engine/devices.h"
#include "engine/executor.h"
#include "engine/gloo_transport.h"

using namespace pw;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point since)
{
    return std::chrono::duration<double>(Clock::now() - since).count();
}

int iterationsFor(std::size_t bytes, int iters)
{
    // Small messages are latency: many of them; large ones are bandwidth: a few move enough bytes.
    if (bytes <= (1u << 16))
        return iters * 10;
    return std::max(3, static_cast<int>(static_cast<double>(iters) * double(1u << 22) / double(bytes)) + 2);
}

/// Runs `device(d, all)` for d = 0..devices-1 on threads of their own (`all`: every device, the one collective
/// group); returns the slowest one's time and rethrows the first failure.
double onThreads(int devices, const std::function<double(int, const std::vector<int>&)>& device)
{
    std::vector<int> all(static_cast<std::size_t>(devices));
    for (int k = 0; k < devices; ++k)
        all[static_cast<std::size_t>(k)] = k;
    std::vector<double> times(static_cast<std::size_t>(devices), 0.0);
    std::vector<std::string> errors(static_cast<std::size_t>(devices));
    std::vector<std::thread> threads;
    for (int d = 0; d < devices; ++d)
        threads.emplace_back([&, d] {
            try {
                times[static_cast<std::size_t>(d)] = device(d, all);
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(d)] = e.what();
            }
        });
    for (auto& t : threads)
        t.join();
    for (const auto& e : errors)
        if (!e.empty())
            throw std::runtime_error(e);
    return *std::max_element(times.begin(), times.end());
}

/// `devices` Gloo transports on threads; `body(device, transport)` runs on each; returns the slowest device's time.
double onDevices(int devices, const std::function<double(int, engine::Transport&)>& body)
{
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    static int run = 0;
    const std::string prefix = "bench-" + std::to_string(++run);
    return onThreads(devices, [&](int d, const std::vector<int>& all) {
        engine::GlooOptions o;
        o.prefix = prefix;
        o.secret.assign(32, 42);
        o.timeout = std::chrono::seconds(60);
        auto t = engine::makeGlooTransport(d, devices, store, o);
        t->makeGroups({all});
        const double s = body(d, *t);
        t->flush();
        return s;
    });
}

/// Seconds per send/receive of `bytes` in each direction between two Gloo devices.
double glooSendRecv(std::size_t bytes, int iterations)
{
    return onDevices(2, [&](int d, engine::Transport& t) {
        std::vector<float> out(bytes / sizeof(float), static_cast<float>(d)), in(out.size());
        const std::vector<engine::Transfer> exchange {
            {engine::Transfer::Direction::Send, 1 - d, 1, {out.data(), engine::DType::F32, out.size()}},
            {engine::Transfer::Direction::Recv, 1 - d, 1, {in.data(), engine::DType::F32, in.size()}}};
        for (auto& h : t.exchange(exchange)) // warm-up: the pair's buffers and the kernel's socket windows
            h.wait();
        const auto t0 = Clock::now();
        for (int i = 0; i < iterations; ++i)
            for (auto& h : t.exchange(exchange))
                h.wait();
        t.flush();
        const double s = seconds(t0) / iterations;
        if (in.front() != static_cast<float>(1 - d) || in.back() != static_cast<float>(1 - d))
            throw std::runtime_error("send/receive delivered the wrong data");
        return s;
    });
}

/// Seconds per all-reduce of `bytes` among `devices` Gloo devices.
double glooAllReduce(int devices, std::size_t bytes, int iterations)
{
    return onDevices(devices, [&](int d, engine::Transport& t) {
        std::vector<int> all(static_cast<std::size_t>(devices));
        for (int k = 0; k < devices; ++k)
            all[static_cast<std::size_t>(k)] = k;
        std::vector<float> data(bytes / sizeof(float), 0.0f);
        const engine::Region region {data.data(), engine::DType::F32, data.size()};
        t.allReduceSum(all, region).wait(); // warm-up
        const auto t0 = Clock::now();
        for (int i = 0; i < iterations; ++i)
            t.allReduceSum(all, region).wait();
        const double s = seconds(t0) / iterations;
        // One more, checked: device d contributes d + 1, so every element is n(n + 1)/2.
        std::fill(data.begin(), data.end(), static_cast<float>(d + 1));
        t.allReduceSum(all, region).wait();
        if (data.front() != static_cast<float>(devices * (devices + 1) / 2) || data.back() != data.front())
            throw std::runtime_error("all-reduce summed wrong");
        return s;
    });
}

void sendAll(int fd, const char* p, std::size_t n)
{
    while (n > 0) {
        const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            throw std::runtime_error("baseline socket send failed");
        p += k;
        n -= static_cast<std::size_t>(k);
    }
}

void recvAll(int fd, char* p, std::size_t n)
{
    while (n > 0) {
        const ssize_t k = ::recv(fd, p, n, 0);
        if (k <= 0)
            throw std::runtime_error("baseline socket receive failed");
        p += k;
        n -= static_cast<std::size_t>(k);
    }
}

/// Seconds per exchange of `bytes` each way over plain loopback TCP (a sending and a receiving thread per end).
double tcpBaseline(std::size_t bytes, int iterations)
{
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listener, 1) != 0
        || ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
        throw std::runtime_error("baseline: cannot listen on 127.0.0.1");
    const int a = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(a, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
        throw std::runtime_error("baseline: cannot connect");
    const int b = ::accept(listener, nullptr, nullptr);
    ::close(listener);
    for (int fd : {a, b}) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    std::barrier sync(4);
    std::vector<double> times(2);
    auto end = [&](int fd, int which) {
        std::vector<char> out(bytes, 1), in(bytes);
        std::thread sender([&] {
            for (int i = 0; i <= iterations; ++i) {
                sync.arrive_and_wait();
                sendAll(fd, out.data(), bytes);
            }
        });
        Clock::time_point t0;
        for (int i = 0; i <= iterations; ++i) {
            sync.arrive_and_wait();
            if (i == 1)
                t0 = Clock::now(); // the first exchange warms up
            recvAll(fd, in.data(), bytes);
        }
        times[static_cast<std::size_t>(which)] = seconds(t0) / iterations;
        sender.join();
    };
    std::thread ta(end, a, 0), tb(end, b, 1);
    ta.join();
    tb.join();
    ::close(a);
    ::close(b);
    return std::max(times[0], times[1]);
}

std::string sizeText(std::size_t bytes)
{
    char text[32];
    if (bytes >= (1u << 20))
        std::snprintf(text, sizeof(text), "%zu MiB", bytes >> 20);
    else if (bytes >= (1u << 10))
        std::snprintf(text, sizeof(text), "%zu KiB", bytes >> 10);
    else
        std::snprintf(text, sizeof(text), "%zu B", bytes);
    return text;
}

// --- NCCL -------------------------------------------------------------------------------------------------------

std::shared_ptr<engine::Backend> gpuBackend(int index)
{
    engine::DeviceChoice choice;
    choice.cuda = index;
    return std::shared_ptr<engine::Backend>(engine::makeBackend(choice));
}

/// `devices` NCCL transports, device d on cuda:d, on threads; every device in one group. `body` returns seconds.
double onGpus(int devices, const std::function<double(int, engine::Transport&, engine::Backend&)>& body)
{
    engine::MemoryRendezvous store;
    return onThreads(devices, [&](int d, const std::vector<int>& all) {
        auto backend = gpuBackend(d);
        engine::NcclOptions o;
        o.prefix = "bench";
        o.timeout = std::chrono::seconds(60);
        auto t = engine::makeNcclTransport(d, devices, store, backend, o);
        t->makeGroups({all});
        const double s = body(d, *t, *backend);
        t->flush();
        return s;
    });
}

/// Seconds per send/receive of `bytes` each way: to itself on one GPU (`devices` 1), or between GPUs 0 and 1.
double ncclSendRecv(int devices, std::size_t bytes, int iterations)
{
    return onGpus(devices, [&](int d, engine::Transport& t, engine::Backend& b) {
        const std::size_t n = bytes / sizeof(float);
        engine::Buffer out(b, n, engine::DType::F32), in(b, n, engine::DType::F32);
        const std::vector<float> value(n, static_cast<float>(d + 1));
        b.upload(out.data(), engine::DType::F32, value.data(), n);
        const int peer = devices == 1 ? 0 : 1 - d;
        const std::vector<engine::Transfer> exchange {{engine::Transfer::Direction::Send, peer, 1, engine::region(out)},
            {engine::Transfer::Direction::Recv, peer, 1, engine::region(in)}};
        const auto once = [&] {
            for (auto& h : t.exchange(exchange))
                h.wait();
        };
        once(); // warm-up: NCCL's connections between the pair are made on first use
        b.synchronize();
        const auto t0 = Clock::now();
        for (int i = 0; i < iterations; ++i)
            once();
        b.synchronize();
        const double s = seconds(t0) / iterations;
        float first = 0;
        b.download(&first, in.data(), engine::DType::F32, 1);
        if (first != static_cast<float>(peer + 1))
            throw std::runtime_error("NCCL send/receive delivered the wrong data");
        return s;
    });
}

/// Seconds per all-reduce of `bytes` among `devices` GPUs.
double ncclAllReduce(int devices, std::size_t bytes, int iterations)
{
    return onGpus(devices, [&](int d, engine::Transport& t, engine::Backend& b) {
        std::vector<int> all(static_cast<std::size_t>(devices));
        for (int k = 0; k < devices; ++k)
            all[static_cast<std::size_t>(k)] = k;
        const std::size_t n = bytes / sizeof(float);
        engine::Buffer data(b, n, engine::DType::F32);
        b.zero(data.data(), data.bytes());
        t.allReduceSum(all, engine::region(data)).wait(); // warm-up
        b.synchronize();
        const auto t0 = Clock::now();
        for (int i = 0; i < iterations; ++i)
            t.allReduceSum(all, engine::region(data)).wait();
        b.synchronize();
        const double s = seconds(t0) / iterations;
        const std::vector<float> value(n, static_cast<float>(d + 1));
        b.upload(data.data(), engine::DType::F32, value.data(), n);
        t.allReduceSum(all, engine::region(data)).wait();
        float first = 0;
        b.download(&first, data.data(), engine::DType::F32, 1);
        if (first != static_cast<float>(devices * (devices + 1) / 2))
            throw std::runtime_error("NCCL all-reduce summed wrong");
        return s;
    });
}

/// Seconds per device-to-device copy of `bytes` on GPU 0 through its backend.
double copyBaseline(std::size_t bytes, int iterations)
{
    auto b = gpuBackend(0);
    engine::Buffer src(*b, bytes, engine::DType::F32), dst(*b, bytes, engine::DType::F32); // elements: room to spare
    b->copy(dst.data(), src.data(), bytes);
    b->synchronize();
    const auto t0 = Clock::now();
    for (int i = 0; i < iterations; ++i)
        b->copy(dst.data(), src.data(), bytes);
    b->synchronize();
    return seconds(t0) / iterations;
}

int ncclBench(std::size_t maxBytes, int iters)
{
    const int gpus = engine::cudaDeviceCount();
    const std::string version = engine::probeCuda().nccl;
    if (!engine::ncclCompiledIn() || gpus == 0 || version.rfind("not found", 0) == 0) {
        std::printf("[pw-skip] NCCL mode: %s\n",
            !engine::ncclCompiledIn() ? "this build has no CUDA"
                : gpus == 0           ? "no CUDA device is visible"
                                      : ("NCCL " + version + " (LD_LIBRARY_PATH?)").c_str());
        return 0;
    }
    std::printf("# NCCL %s on %d GPU(s) (cuda:0 %s), devices as threads of one process\n", version.c_str(), gpus,
        engine::probeCuda().gpus.front().name.c_str());
    std::printf("# time: per operation; algbw = size / time; busbw: sendrecv = algbw, allreduce = algbw x 2(n-1)/n;\n"
                "# ratio: the transport's busbw over a device-to-device copy on cuda:0 of the same size\n");
    if (gpus < 2)
        std::printf("[pw-skip] sendrecv and all-reduce between GPUs: %d GPU visible, 2 needed\n", gpus);
    std::printf("%-10s %10s %5s  %-13s %12s %10s %10s %8s\n", "size", "count", "type", "operation", "time (us)",
        "algbw GB/s", "busbw GB/s", "ratio");
    for (std::size_t bytes = 1024; bytes <= maxBytes; bytes *= 4) {
        const int n = iterationsFor(bytes, iters) * 4; // the GPU is fast: more of them for a stable time
        const double base = copyBaseline(bytes, n);
        const double baseBw = static_cast<double>(bytes) / base / 1e9;
        const auto row = [&](const std::string& op, double s, double busFactor) {
            const double alg = static_cast<double>(bytes) / s / 1e9;
            std::printf("%-10s %10zu %5s  %-13s %12.1f %10.3f %10.3f %8.2f\n", sizeText(bytes).c_str(),
                bytes / sizeof(float), "float", op.c_str(), s * 1e6, alg, alg * busFactor, alg * busFactor / baseBw);
            std::fflush(stdout);
        };
        std::printf("%-10s %10zu %5s  %-13s %12.1f %10.3f %10.3f %8.2f\n", sizeText(bytes).c_str(), bytes, "byte",
            "d2d copy", base * 1e6, baseBw, baseBw, 1.0);
        row("sendrecv self", ncclSendRecv(1, bytes, n), 1.0);
        row("allreduce 1", ncclAllReduce(1, bytes, n), 1.0);
        if (gpus >= 2) {
            row("sendrecv 2", ncclSendRecv(2, bytes, n), 1.0);
            row("allreduce " + std::to_string(gpus), ncclAllReduce(gpus, bytes, n),
                2.0 * (gpus - 1) / static_cast<double>(gpus));
        }
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    std::size_t maxBytes = std::size_t {64} << 20;
    int iters = 10;
    bool nccl = false;
    for (int i = 1; i < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--nccl") {
            nccl = true;
            --i; // no value
        } else if (i + 1 >= argc) {
            std::fprintf(stderr, "usage: bench_transport [--nccl] [--max-bytes N] [--iters N]\n");
            return 2;
        } else if (flag == "--max-bytes")
            maxBytes = std::strtoull(argv[i + 1], nullptr, 10);
        else if (flag == "--iters")
            iters = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: bench_transport [--nccl] [--max-bytes N] [--iters N]\n");
            return 2;
        }
    }
    if (nccl)
        try {
            return ncclBench(maxBytes, iters);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "bench_transport --nccl: %s\n", e.what());
            return 1;
        }
    std::printf("# Gloo over TCP on 127.0.0.1 (devices as threads of one process); %u cores\n",
        std::thread::hardware_concurrency());
    std::printf("# time: per operation; algbw = size / time; busbw: sendrecv = algbw, allreduce = algbw x 2(n-1)/n;\n"
                "# ratio: the transport's busbw over plain TCP's (both directions at once) at the same size\n");
    std::printf("%-10s %10s %5s  %-13s %12s %10s %10s %8s\n", "size", "count", "type", "operation", "time (us)",
        "algbw GB/s", "busbw GB/s", "ratio");
    for (std::size_t bytes = 1024; bytes <= maxBytes; bytes *= 4) {
        const int n = iterationsFor(bytes, iters);
        const double base = tcpBaseline(bytes, n);
        const double baseBw = static_cast<double>(bytes) / base / 1e9;
        const auto row = [&](const char* op, double s, double busFactor) {
            const double alg = static_cast<double>(bytes) / s / 1e9;
            std::printf("%-10s %10zu %5s  %-13s %12.1f %10.3f %10.3f %8.2f\n", sizeText(bytes).c_str(),
                bytes / sizeof(float), "float", op, s * 1e6, alg, alg * busFactor, alg * busFactor / baseBw);
            std::fflush(stdout);
        };
        std::printf("%-10s %10zu %5s  %-13s %12.1f %10.3f %10.3f %8.2f\n", sizeText(bytes).c_str(), bytes, "byte",
            "tcp baseline", base * 1e6, baseBw, baseBw, 1.0);
        row("sendrecv 2", glooSendRecv(bytes, n), 1.0);
        row("allreduce 2", glooAllReduce(2, bytes, n), 1.0);
        row("allreduce 4", glooAllReduce(4, bytes, n), 1.5);
    }
    return 0;
}
