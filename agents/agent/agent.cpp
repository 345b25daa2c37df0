// SPDX-License-Identifier: MIT
#include "agent.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <gloo/rendezvous/store.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "activity.h"
#include "drop_send.h"
#include "engine/backend.h"
#include "engine/checkpoint.h"
#include "engine/cuda/nccl_transport.h"
#include "engine/data.h"
#include "engine/device_fabric.h"
#include "engine/devices.h"
#include "engine/executor.h"
#include "engine/gloo_transport.h"
#include "engine/llmc.h"
#include "engine/ops.h"
#include "planner/errors.h"

namespace pw::agents {

namespace {

using namespace std::chrono_literals;

std::atomic<bool> g_stopRequested {false};
std::atomic<int> g_stopSignal {0}; ///< the signal that asked for the stop (requestAgentStop), 0: none

/// @brief Everything the session's threads share.
class Session
{
public:
    Session(int in, int out, const ServeOptions* serve = nullptr)
        : m_in(in)
        , m_out(out)
    {
        if (serve) {
            m_listen = serve->listen_fd;
            m_linger = serve->linger;
        }
    }

    int run();
    /// A served agent after its run: waits until the controller says goodbye (Stop after Done), or has been away
    /// for the linger time, so that a Done the controller missed is sent again when it reconnects.
    void awaitGoodbye();

private:
    void readLoop();
    void heartbeatLoop();
    void telemetryLoop();
    void train(const RunSpec& spec);
    void send(const Message& m) { writeFrames(encode(m)); }
    void writeFrames(std::string_view bytes);
    bool serving() const { return m_listen >= 0; }
    /// Waits for the controller's next connection on the listening socket; -1 after the linger time.
    int acceptWithinLinger();
    void log(LogLevel level, const std::string& text) { send(Log {level, text, engine::monotonicSeconds()}); }
    void queueSpan(const planner::Span& s);
    void queueMetric(Metric m);
    void flushTelemetry();
    void resend(std::int64_t from);
    bool stopping() const { return m_stop.load() || g_stopRequested.load(); }
    /// Why the session stopped, for its Done: the controller's reason, or the signal that asked it here.
    std::string stopText() const
    {
        if (!m_stopReason.empty())
            return m_stopReason;
        if (!m_stop.load() && g_stopRequested.load()) {
            const int signal = g_stopSignal.load();
            return "stopped by a signal on its host"
                + std::string(signal == SIGTERM ? " (SIGTERM)"
                        : signal == SIGINT      ? " (SIGINT)"
                                                : "")
                + ", not by the controller";
        }
        return "stopped";
    }

    friend class RelayStore;

    int m_in; ///< read by the reader thread only
    std::mutex m_outMutex;
    int m_out; ///< -1 while a served agent's controller is away (frames are dropped: telemetry is journaled)
    int m_listen = -1; ///< a served agent's unix socket
    std::chrono::seconds m_linger {30};
    std::atomic<bool> m_goodbye {false}; ///< Stop after Done: the controller has everything
    std::atomic<bool> m_controllerGone {false};
    std::optional<Done> m_done; ///< sent again on Resume (a served agent's controller may have missed it)
    std::mutex m_mutex;
    std::condition_variable m_changed;
    std::optional<RunSpec> m_spec;
    bool m_started = false;
    bool m_running = false; ///< devices are executing: a lost controller ends the process at once
    std::atomic<bool> m_stop {false};
    std::atomic<bool> m_finished {false};
    std::string m_stopReason;
    std::map<std::string, std::vector<std::uint8_t>> m_rendezvous;
    // Telemetry
    std::mutex m_telemetryMutex;
    Telemetry m_batch;
    std::int64_t m_seq = 0;
    std::int64_t m_nextSpan = 1; ///< the number of the next span sent (Telemetry::first_span)
    bool m_paused = false; ///< reconnected, waiting for Resume: new batches are journaled only
    int m_batchLimit = 64;
    std::ofstream m_journal;
    std::string m_journalPath;
    std::atomic<std::int64_t> m_steps {0};
    /// What each device is doing and its flight recorder; set once the spec is known (never freed: the detached
    /// reader may answer a FlightRecorderAsk until the process ends).
    std::atomic<DeviceActivity*> m_activity {nullptr};
};

/// @brief Gloo's key/value store, relayed by the controller: agents open no port for rendezvous.
class RelayStore final : public gloo::rendezvous::Store
{
public:
    explicit RelayStore(Session& s)
        : m_session(s)
    {
    }

    void set(const std::string& key, const std::vector<char>& data) override
    {
        m_session.send(RendezvousSet {key, std::vector<std::uint8_t>(data.begin(), data.end())});
    }

    std::vector<char> get(const std::string& key) override
    {
        wait({key});
        std::lock_guard lock(m_session.m_mutex);
        const auto& v = m_session.m_rendezvous.at(key);
        return {v.begin(), v.end()};
    }

    void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(120000)); }

    void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override
    {
        for (const auto& key : keys) {
            {
                std::lock_guard lock(m_session.m_mutex);
                if (m_session.m_rendezvous.count(key))
                    continue;
            }
            m_session.send(RendezvousGet {key});
            std::unique_lock lock(m_session.m_mutex);
            if (!m_session.m_changed.wait_for(
                    lock, timeout, [&] { return m_session.m_rendezvous.count(key) || m_session.stopping(); }))
                throw std::runtime_error("rendezvous: no value for '" + key + "' within "
                    + std::to_string(timeout.count() / 1000) + " s (is another agent of the run missing?)");
            if (m_session.stopping())
                throw std::runtime_error("rendezvous: the run was stopped");
        }
    }

private:
    Session& m_session;
};

/// @brief The relayed store as the engine's neutral rendezvous (NCCL's unique id travels through it).
class RelayRendezvous final : public engine::Rendezvous
{
public:
    explicit RelayRendezvous(std::shared_ptr<RelayStore> store)
        : m_store(std::move(store))
    {
    }
    void set(const std::string& key, const std::vector<std::uint8_t>& value) override
    {
        m_store->set(key, std::vector<char>(value.begin(), value.end()));
    }
    std::vector<std::uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override
    {
        m_store->wait({key}, timeout);
        const std::vector<char> v = m_store->get(key);
        return {v.begin(), v.end()};
    }

private:
    std::shared_ptr<RelayStore> m_store;
};

std::int64_t residentBytes()
{
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    statm >> pages >> resident;
    return static_cast<std::int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

void Session::writeFrames(std::string_view bytes)
{
    std::lock_guard lock(m_outMutex);
    if (m_out < 0)
        return; // a served agent's controller is away: what matters is journaled and sent again on Resume
    try {
        writeAll(m_out, bytes);
    } catch (const std::system_error&) {
        if (!serving())
            throw;
        ::shutdown(m_out, SHUT_RDWR); // the reader sees the end and waits for the controller to come back
        m_out = -1;
    }
}

int Session::acceptWithinLinger()
{
    pollfd p {m_listen, POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + m_linger;
    for (;;) {
        const auto left
            = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0 || m_goodbye)
            return -1;
        const int ready = ::poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 200)));
        if (ready > 0) {
            const int fd = ::accept4(m_listen, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd >= 0)
                return fd;
        }
    }
}

void Session::readLoop()
{
    for (;;) {
        const int fd = m_in;
        FrameReader reader(fd);
        try {
            while (auto frame = reader.read()) {
                Message m = decode(*frame);
                if (const auto* probe = std::get_if<ClockProbe>(&m)) {
                    // Answered at once, outside the session's lock: the reply's time is this host's clock (the
                    // clock of every span) as close to the probe's arrival as the agent can read it.
                    send(ClockReply {probe->id, probe->controller_t_s, engine::monotonicSeconds()});
                    continue;
                }
                if (std::holds_alternative<FlightRecorderAsk>(m)) {
                    // Answered here, at once: the devices may be blocked in a transfer that never ends (the reason
                    // the controller asks).
                    FlightRecorder r {m_batch.agent, engine::monotonicSeconds(), {}};
                    if (const DeviceActivity* activity = m_activity.load())
                        r.actions = activity->recorder();
                    send(r);
                    continue;
                }
                std::lock_guard lock(m_mutex);
                if (auto* spec = std::get_if<RunSpec>(&m))
                    m_spec = std::move(*spec);
                else if (std::holds_alternative<Start>(m))
                    m_started = true;
                else if (auto* stop = std::get_if<Stop>(&m)) {
                    if (m_finished && serving())
                        m_goodbye = true; // after Done: the controller has everything
                    m_stopReason = stop->reason;
                    m_stop = true;
                } else if (auto* value = std::get_if<RendezvousValue>(&m))
                    m_rendezvous[value->key] = value->value;
                else if (auto* resume = std::get_if<Resume>(&m))
                    resend(resume->from_seq);
                m_changed.notify_all();
                if (m_goodbye)
                    return;
            }
        } catch (const ProtocolError& e) {
            try {
                send(Error {std::string("agent: bad input from the controller: ") + e.what(), true});
            } catch (...) {
            }
        } catch (const std::exception& e) {
            if (!serving())
                try {
                    send(Error {std::string("agent: reading from the controller: ") + e.what(), true});
                } catch (...) {
                }
        }
        if (serving()) {
            // The connection dropped (an SSH link went down): training goes on, telemetry is journaled, and the
            // controller may come back and Resume. After the linger time without it, the agent stops the run.
            {
                std::lock_guard lock(m_outMutex);
                if (m_out == fd)
                    m_out = -1;
            }
            ::close(fd);
            {
                std::lock_guard lock(m_telemetryMutex);
                m_paused = true;
            }
            const int next = acceptWithinLinger();
            if (next < 0) {
                std::lock_guard lock(m_mutex);
                if (!m_goodbye) {
                    m_controllerGone = true;
                    m_stopReason = "the controller was away for more than " + std::to_string(m_linger.count()) + " s";
                    m_stop = true;
                }
                m_changed.notify_all();
                return;
            }
            m_in = next;
            std::lock_guard lock(m_outMutex);
            m_out = next;
            continue;
        }
        // The controller is gone (or spoke nonsense): nothing of the run may outlive it. Devices blocked in a
        // transfer cannot be interrupted, so the process ends here.
        std::lock_guard lock(m_mutex);
        if (m_running || !m_finished) {
            if (m_journal.is_open())
                m_journal.flush();
            std::_Exit(m_running ? 3 : 0);
        }
        return;
    }
}

void Session::awaitGoodbye()
{
    std::unique_lock lock(m_mutex);
    while (!m_goodbye && !m_controllerGone)
        m_changed.wait_for(lock, 100ms);
}

void Session::heartbeatLoop()
{
    while (!m_finished) {
        try {
            const DeviceActivity* activity = m_activity.load();
            send(Heartbeat {engine::monotonicSeconds(), m_steps.load(),
                activity ? activity->progress() : std::vector<DeviceProgress> {}});
            queueMetric({m_steps.load(), "memory", static_cast<double>(residentBytes()), engine::monotonicSeconds(),
                m_spec && !m_spec->devices.empty() ? m_spec->devices.front() : -1});
        } catch (...) {
            return;
        }
        for (int i = 0; i < 10 && !m_finished; ++i)
            std::this_thread::sleep_for(100ms);
    }
}

void Session::telemetryLoop()
{
    while (!m_finished) {
        std::this_thread::sleep_for(100ms);
        try {
            flushTelemetry();
        } catch (...) {
            return;
        }
    }
}

void Session::queueSpan(const planner::Span& s)
{
    bool full = false;
    {
        std::lock_guard lock(m_telemetryMutex);
        m_batch.spans.push_back(s);
        full = static_cast<int>(m_batch.spans.size()) >= m_batchLimit;
    }
    if (full)
        flushTelemetry();
}

void Session::queueMetric(Metric m)
{
    std::lock_guard lock(m_telemetryMutex);
    m_batch.metrics.push_back(std::move(m));
}

void Session::flushTelemetry()
{
    std::lock_guard lock(m_telemetryMutex);
    if (m_batch.spans.empty() && m_batch.metrics.empty())
        return;
    m_batch.seq = ++m_seq;
    m_batch.first_span = m_nextSpan;
    m_nextSpan += static_cast<std::int64_t>(m_batch.spans.size());
    const std::string bytes = encode(m_batch);
    // Journal first: whatever the controller missed can be sent again from here (Resume).
    if (m_journal.is_open()) {
        m_journal.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        m_journal.flush();
    }
    m_batch.spans.clear();
    m_batch.metrics.clear();
    if (!m_paused)
        writeFrames(bytes);
}

void Session::resend(std::int64_t from)
{
    {
        std::lock_guard lock(m_telemetryMutex);
        if (!m_journalPath.empty()) {
            if (m_journal.is_open())
                m_journal.flush();
            std::ifstream in(m_journalPath, std::ios::binary);
            FrameDecoder decoder;
            std::string chunk(1 << 16, '\0');
            while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
                decoder.feed(std::string_view(chunk.data(), static_cast<std::size_t>(in.gcount())));
                while (auto frame = decoder.next()) {
                    const auto t = std::get<Telemetry>(decode(*frame));
                    if (t.seq > from)
                        writeFrames(encodeFrame(*frame));
                }
            }
        }
        m_paused = false;
    }
    if (m_done) // the run ended while the controller was away
        send(*m_done);
}

/// The backend of each of the spec's devices: null (the executor's own CPU backend, as before there were others)
/// for a CPU device, else one CUDA backend per device executor. Every CUDA index is checked against the devices
/// this process sees before any is made, so that a wrong index fails the run at once, naming the fix.
std::vector<std::shared_ptr<engine::Backend>> deviceBackends(const RunSpec& spec)
{
    std::vector<std::shared_ptr<engine::Backend>> out(spec.devices.size());
    if (spec.cuda_devices.empty())
        return out;
    if (spec.cuda_devices.size() != spec.devices.size())
        throw planner::InputError("the run spec names " + std::to_string(spec.cuda_devices.size())
            + " CUDA devices for " + std::to_string(spec.devices.size()) + " devices");
    const bool cuda = std::any_of(spec.cuda_devices.begin(), spec.cuda_devices.end(), [](int g) { return g >= 0; });
    const int visible = cuda ? engine::cudaDeviceCount() : 0;
    const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
    for (std::size_t k = 0; k < spec.devices.size(); ++k) {
        const int gpu = spec.cuda_devices[k];
        if (gpu < 0)
            continue;
        const std::string device = "device " + std::to_string(spec.devices[k]) + " (cuda:" + std::to_string(gpu) + ")";
        if (!engine::cudaCompiledIn())
            throw planner::InputError(device
                + ": this agent was built without CUDA kernels: build it where nvcc is found (PW_WITH_CUDA=AUTO or "
                  "ON)");
        if (gpu >= visible)
            throw planner::InputError(device + ": the agent sees " + std::to_string(visible) + " CUDA device"
                + (visible == 1 ? "" : "s") + " (CUDA_VISIBLE_DEVICES "
                + (mask ? "'" + std::string(mask) + "'" : std::string("unset"))
                + (visible == 0 ? "; " + engine::probeCuda().error : std::string()) + "): "
                + (visible == 0 ? std::string("run it on a machine with an NVIDIA GPU and its driver, or remove the "
                                              "node's \"gpus\" in the cluster file to train on the CPU")
                                : "set the node's \"gpus\" in the cluster file to indices below "
                            + std::to_string(visible) + ", or make more devices visible in its env"));
    }
    const auto precision = spec.precision == Precision::Bf16 ? engine::Precision::Bf16Mixed : engine::Precision::Fp32;
    for (std::size_t k = 0; k < spec.devices.size(); ++k)
        if (spec.cuda_devices[k] >= 0)
            out[k] = engine::makeBackend({spec.cuda_devices[k], precision});
    return out;
}

void Session::train(const RunSpec& spec)
{
    const planner::Plan plan = planner::planFromJson(spec.plan);
    // The plan's precision on this agent's devices: bf16 mixed only when every one of them is a GPU.
    const bool gpus = !spec.cuda_devices.empty()
        && std::all_of(spec.cuda_devices.begin(), spec.cuda_devices.end(), [](int g) { return g >= 0; });
    engine::TrainingSetup setup = engine::trainingSetup(plan, gpus ? engine::TrainsOn::Cuda : engine::TrainsOn::Cpu);
    const auto asked = spec.precision == Precision::Bf16 ? engine::Precision::Bf16Mixed : engine::Precision::Fp32;
    if (gpus && asked != setup.precision)
        throw planner::InputError(std::string("the run spec asks for ") + engine::toString(asked)
            + ", but the plan's weights train in " + engine::toString(setup.precision));
    // The run's training options (the user's, as the controller sent them) on the plan's setup.
    const TrainingOptions& training = spec.training;
    setup.adam.lr = training.lr;
    setup.adam.weight_decay = training.weight_decay;
    setup.adam.warmup_steps = training.warmup_steps;
    setup.adam.cosine = training.cosine;
    setup.adam.total_steps = training.steps;
    setup.seed = training.seed;
    if (!training.init_checkpoint.empty()) {
        auto ckpt = engine::readModelCheckpoint(training.init_checkpoint, setup.model, setup.shape.seq);
        setup.model = ckpt.config; // llm.c's: its padded vocabulary and positions
        setup.checkpoint = std::make_shared<const std::vector<float>>(std::move(ckpt.params));
    }
    if (!training.save_checkpoint.empty()) // on this host, before it trains (a local run's controller checked too)
        engine::checkSaveDestination(training.save_checkpoint, setup.model);
    engine::ops::setThreads(spec.threads);
    engine::DataSpec data;
    data.kind = engine::dataKindFromString(std::string(toString(training.data.kind)));
    data.path = training.data.path;
    data.seed = training.data.seed;
    const engine::DataOrder order(
        engine::loadTokens(data, setup.model.vocab, static_cast<std::size_t>(setup.shape.batch) * setup.shape.seq),
        setup.microbatches, setup.shape.batch, setup.shape.seq);
    const engine::RunSchedule program = engine::runProgram(plan, training.steps);
    const planner::Schedule& schedule = program.period;
    for (int d : spec.devices)
        if (d < 0 || d >= schedule.num_devices)
            throw planner::InputError("device " + std::to_string(d) + " is not in the plan's cluster");

    // Transports: Gloo between agents (rendezvous through the controller), NCCL between GPUs when the controller
    // chose it (every device of the plan on a GPU of its own; its unique id through the same relayed store), or
    // in-process when this agent holds every device of the plan. NCCL reads its settings (NCCL_SOCKET_IFNAME,
    // NCCL_IB_*, NCCL_DEBUG) from this process's environment: the node's `env` in the cluster file.
    std::unique_ptr<engine::LocalFabric> fabric;
    std::vector<std::unique_ptr<engine::Transport>> gloo;
    auto store = std::make_shared<RelayStore>(*this);
    RelayRendezvous rendezvous(store);
    // The run's devices are the plan's: a plan may leave some of its cluster's devices idle, and no transport waits
    // for those.
    const std::vector<int> runDevices = plan.devicesUsed();
    if (spec.transport == Transport::Local) {
        if (spec.devices.size() != runDevices.size())
            throw planner::InputError("the local transport needs every device of the plan in one agent");
        fabric = std::make_unique<engine::LocalFabric>(schedule.num_devices);
    }
    std::vector<std::shared_ptr<engine::Backend>> backends = deviceBackends(spec);
    for (auto& b : backends)
        if (!b)
            b = engine::makeCpuBackend(); // a CPU device: its own backend, so its memory is counted too
    // This agent's devices that share memory (one GPU: the controller gives all of its devices to one agent; or
    // the host's, for CPU devices in one agent) exchange in it over a device fabric; the rest of the run, if any,
    // is reached through the run's transport.
    std::vector<std::vector<std::shared_ptr<engine::Backend>>> byMemory;
    for (std::size_t k = 0; k < spec.devices.size(); ++k) {
        auto group = std::find_if(byMemory.begin(), byMemory.end(), [&](const auto& members) {
            const auto first = std::find_if(members.begin(), members.end(), [](const auto& b) { return b != nullptr; });
            return (*first)->sharesMemoryWith(*backends[k]);
        });
        if (group == byMemory.end())
            group = byMemory.emplace(byMemory.end(), static_cast<std::size_t>(schedule.num_devices));
        (*group)[static_cast<std::size_t>(spec.devices[k])] = backends[k];
    }
    std::vector<std::unique_ptr<engine::DeviceFabric>> fabrics;
    std::map<int, engine::DeviceFabric*> fabricOf; // device -> its fabric
    for (auto& members : byMemory)
        if (std::count_if(members.begin(), members.end(), [](const auto& b) { return b != nullptr; }) > 1) {
            fabrics.push_back(std::make_unique<engine::DeviceFabric>(members));
            for (int d : fabrics.back()->devices())
                fabricOf[d] = fabrics.back().get();
        }
    const auto abortLinks = [&](const std::string& why) {
        if (fabric)
            fabric->abort(why);
        for (auto& f : fabrics)
            f->abort(why);
    };
    const std::optional<DroppedSend> dropped = droppedSendFromEnv();
    std::vector<std::unique_ptr<engine::Transport>> linked; // a fabric device's links, staging and routing
    std::vector<std::unique_ptr<engine::Transport>> hooked; // before the executors: they use it until they end
    std::vector<std::unique_ptr<engine::DeviceExecutor>> executors;
    for (std::size_t k = 0; k < spec.devices.size(); ++k) {
        const int d = spec.devices[k];
        engine::Transport* t = nullptr;
        engine::DeviceFabric* shared = fabricOf.count(d) ? fabricOf[d] : nullptr;
        if (shared && shared->devices() == runDevices)
            t = &shared->endpoint(d); // the whole run in this memory: nothing else to reach
        else if (fabric)
            t = &fabric->endpoint(d);
        else if (spec.transport == Transport::Nccl) {
            engine::NcclOptions o;
            o.prefix = spec.run_id;
            gloo.push_back(engine::makeNcclTransport(d, runDevices, rendezvous, backends[k], o));
            t = gloo.back().get();
        } else {
            engine::GlooOptions o;
            o.prefix = spec.run_id;
            if (!spec.gloo_host.empty())
                o.hostname = spec.gloo_host;
            if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface)
                o.iface = iface; // the node's environment in the cluster file
            o.secret = spec.gloo_secret; // proves every connection to the run's other agents
            o.warn = [this](const std::string& text) { log(LogLevel::Warning, text); };
            gloo.push_back(engine::makeGlooTransport(d, runDevices, store, o));
            t = gloo.back().get();
        }
        if (shared && t != &shared->endpoint(d)) { // the fabric within its memory, the run's transport beyond
            if (!t->reaches(*backends[k])) {
                linked.push_back(engine::throughHost(*t, *backends[k]));
                t = linked.back().get();
            }
            linked.push_back(engine::linkTransports(shared->endpoint(d), shared->devices(), *t));
            t = linked.back().get();
        }
        if (dropped && dropped->device == d) { // the stall tests' hook (drop_send.h)
            hooked.push_back(
                dropOneSend(*t, *dropped, [this](const std::string& text) { log(LogLevel::Warning, text); }));
            t = hooked.back().get();
        }
        engine::ExecutorSink sink;
        DeviceActivity* activity = m_activity.load();
        sink.begin = [activity](const planner::Span& planned) { activity->begin(planned); };
        sink.span = [this, activity](const planner::Span& s) {
            activity->end(s);
            queueSpan(s);
        };
        sink.loss = [this](int microbatch, float loss) {
            queueMetric({microbatch, "microbatch_loss", loss, engine::monotonicSeconds(), -1});
        };
        // The device's memory as its backend counts it (allocated now, the peak so far), after its first two
        // steps (the peak is reached within the first step of a flushed schedule) and then at most once a second.
        sink.step = [this, d, &spec, backend = backends[k].get(), steps = 0, last = 0.0](int, int) mutable {
            if (d == spec.devices.front())
                ++m_steps;
            const double now = engine::monotonicSeconds();
            if (++steps <= 2 || now - last >= 1.0) {
                last = now;
                const auto memory = backend->memory();
                queueMetric({m_steps.load(), std::string(planner::kDeviceMemoryCounter),
                    static_cast<double>(memory.allocated), now, d});
                queueMetric({m_steps.load(), std::string(planner::kDeviceMemoryPeakCounter),
                    static_cast<double>(memory.peak), now, d});
            }
        };
        executors.push_back(std::make_unique<engine::DeviceExecutor>(
            plan, schedule, d, setup, order, *t, std::move(sink), program.repeats, backends[k]));
    }
    {
        std::unique_lock lock(m_mutex);
        while (!m_started && !stopping())
            m_changed.wait_for(lock, 50ms); // a signal's stop request does not notify
        m_running = true;
    }
    std::mutex failureMutex;
    std::string failure;
    std::atomic<bool> stop {false};
    std::vector<std::thread> threads;
    for (auto& e : executors)
        threads.emplace_back([&, ex = e.get()] {
            try {
                ex->run(stop);
            } catch (const std::exception& ex) {
                std::lock_guard lock(failureMutex);
                if (failure.empty())
                    failure = ex.what();
                stop = true;
                abortLinks(ex.what());
            }
        });
    // Relay a stop request to the executors; they stop between actions.
    std::thread watcher([&] {
        while (!m_finished && !stop) {
            if (stopping())
                stop = true;
            std::this_thread::sleep_for(20ms);
        }
    });
    for (auto& t : threads)
        t.join();
    m_finished = true; // ends the watcher
    watcher.join();
    if (!failure.empty())
        throw std::runtime_error(failure);
    // The trained model: each stage written once (by its first replica: with tensor parallelism its t ranks, each
    // its share) into the one checkpoint file.
    if (!spec.training.save_checkpoint.empty() && !stopping())
        for (std::size_t k = 0; k < executors.size(); ++k)
            for (const auto& [stage, model] : executors[k]->stages()) {
                const auto& devices = plan.stages.at(static_cast<std::size_t>(stage)).devices;
                const auto first = devices.begin()
                    + std::min<std::ptrdiff_t>(
                        std::max(1, plan.tensor_parallel), static_cast<std::ptrdiff_t>(devices.size()));
                if (std::find(devices.begin(), first, spec.devices[k]) != first)
                    engine::writeModelCheckpointPart(spec.training.save_checkpoint, *model);
            }
}

int Session::run()
{
    std::signal(SIGPIPE, SIG_IGN);
    send(capabilities());
    std::thread reader([this] { readLoop(); });
    reader.detach(); // it ends the process when the controller goes away
    RunSpec spec;
    {
        std::unique_lock lock(m_mutex);
        while (!m_spec && !stopping())
            m_changed.wait_for(lock, 50ms);
        if (!m_spec) {
            m_finished = true;
            send(Done {DoneStatus::Stopped, NAN, 0, "stopped before a run was given"});
            return 0;
        }
        spec = *m_spec;
    }
    m_batch.agent = spec.agent;
    m_batchLimit = std::max(1, spec.telemetry_batch);
    m_journalPath = spec.journal_path;
    m_activity = new DeviceActivity(spec.devices);
    if (!m_journalPath.empty())
        m_journal.open(m_journalPath, std::ios::binary | std::ios::trunc);
    std::thread heartbeat([this] { heartbeatLoop(); });
    std::thread telemetry([this] { telemetryLoop(); });
    Done done;
    try {
        train(spec);
        done.status = stopping() ? DoneStatus::Stopped : DoneStatus::Succeeded;
        done.message = stopping() ? stopText() : "";
    } catch (const std::exception& e) {
        done.status = DoneStatus::Failed;
        done.message = e.what();
        try {
            send(Error {e.what(), true});
        } catch (...) {
        }
    }
    m_finished = true;
    heartbeat.join();
    telemetry.join();
    done.steps = m_steps.load();
    done.final_loss = NAN;
    try {
        flushTelemetry();
        {
            std::lock_guard lock(m_mutex);
            m_done = done;
        }
        send(done);
    } catch (...) { // the controller is gone; the reader ends the process
    }
    {
        std::lock_guard lock(m_mutex);
        m_running = false;
    }
    return done.status == DoneStatus::Failed ? 1 : 0;
}

} // namespace

Hello capabilities()
{
    Hello h;
    h.agent_version = PW_VERSION;
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    h.host = host;
    h.pid = getpid();
    h.cores = static_cast<int>(std::thread::hardware_concurrency());
    h.memory_bytes = static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    h.blas = engine::ops::blasName();
    h.backends = {"gloo"};
    if (!h.blas.starts_with("none ("))
        h.backends.insert(h.backends.begin(), "cpu"); // the CPU engine's products are OpenBLAS's
    const engine::CudaInfo cuda = engine::probeCuda();
    h.cuda = {cuda.compiled_in, cuda.runtime, cuda.driver, cuda.cublas, cuda.nccl, cuda.architectures, cuda.error};
    for (const engine::GpuInfo& g : cuda.gpus)
        h.gpus.push_back({g.index, g.name, g.memory_bytes, g.free_bytes, g.cc_major, g.cc_minor});
    if (cuda.compiled_in && !cuda.gpus.empty())
        h.backends.push_back("cuda");
    return h;
}

std::string describeCapabilities(const Hello& h)
{
    const auto gib = [](std::int64_t bytes) {
        char text[32];
        std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / double(1 << 30));
        return std::string(text);
    };
    const auto join = [](const auto& items, const auto& show) {
        std::string out;
        for (const auto& item : items)
            out += (out.empty() ? "" : ", ") + show(item);
        return out;
    };
    std::ostringstream out;
    out << "pipewright-agent " << h.agent_version << " (protocol " << h.protocol_version << ") on " << h.host << "\n";
    out << "  CPU:          " << h.cores << " cores, " << gib(h.memory_bytes) << " memory, " << h.blas << "\n";
    out << "  backends:     " << join(h.backends, [](const std::string& b) { return b; }) << "\n";
    const auto& c = h.cuda;
    out << "  CUDA:         "
        << (c.compiled_in ? "compiled in, kernels for "
                       + join(c.architectures, [](int a) { return "sm_" + std::to_string(a); })
                          : std::string("not compiled in"))
        << "\n";
    out << "  runtime:      " << (c.runtime.empty() ? "none" : c.runtime) << "\n";
    out << "  driver:       " << (c.driver.empty() ? "none" : c.driver) << "\n";
    out << "  cuBLAS:       " << (c.cublas.empty() ? "none" : c.cublas) << "\n";
    out << "  NCCL:         " << (c.nccl.empty() ? "none" : c.nccl) << "\n";
    const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
    out << "  CUDA_VISIBLE_DEVICES: " << (mask ? "'" + std::string(mask) + "'" : std::string("unset")) << "\n";
    if (h.gpus.empty())
        out << "  GPUs:         none" << (c.error.empty() ? "" : " (" + c.error + ")") << "\n";
    else
        out << "  GPUs:         " << h.gpus.size() << "\n";
    for (const GpuCapability& g : h.gpus)
        out << "    cuda:" << g.index << "  " << g.name << ", " << gib(g.memory_bytes) << " ("
            << (g.free_bytes < 0 ? "free unknown" : gib(g.free_bytes) + " free") << "), compute capability "
            << g.cc_major << "." << g.cc_minor
            << (c.runsOn(g.cc_major, g.cc_minor) ? "" : " (the agent's kernels do not run on it)") << "\n";
    return out.str();
}

int runAgentSession(int in_fd, int out_fd)
{
    // Never destroyed: the reader thread is detached (a read(2) cannot be interrupted) and may still be looking
    // at the session while the process exits.
    auto* session = new Session(in_fd, out_fd);
    return session->run();
}

int runServedSession(int connection, const ServeOptions& options)
{
    auto* session = new Session(connection, connection, &options); // never destroyed, as above
    const int status = session->run();
    session->awaitGoodbye();
    return status;
}

bool agentStopRequested()
{
    return g_stopRequested.load();
}

void requestAgentStop(int signal)
{
    g_stopSignal = signal;
    g_stopRequested = true;
}

} // namespace pw::agents
