// SPDX-License-Identifier: MIT
// Deployment over SSH against real sshd processes on 127.0.0.1 (tests/ssh/sshd_fixture.h; needs root):
// (1) telemetry through an SSH channel: 1 M spans in Telemetry frames of 256 spans, sent by a remote `cat` and
//     decoded by the controller's reader, in spans per second (target >= 200,000); baseline in the same run: the
//     same frames through a local pipe;
// (2) the time from Run to the first step of a 3-stage plan on three loopback hosts, the first time (the agent
//     uploaded to each host) and again (cached); baseline in the same run: the same plan with --local agents.
#include <chrono>
#include <cstdio>
#include <fstream>

#include "agents/protocol/frame.h"
#include "agents/protocol/messages.h"
#include "app/history/history.h"
#include "app/launch/ssh.h"
#include "app/run/controller.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/ssh/sshd_fixture.h"

using namespace pw;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::int64_t kSpans = 3907 * 256; // 1,000,192: whole frames of 256
constexpr int kPerBatch = 256;

double seconds(Clock::time_point since)
{
    return std::chrono::duration<double>(Clock::now() - since).count();
}

/// Decodes frames as they come (`next` fills a buffer: bytes, 0 for none yet, -1 at the end); returns the spans.
template <typename Next> std::int64_t decodeAll(Next&& next)
{
    agents::FrameDecoder decoder;
    std::vector<char> buffer(1 << 16);
    std::int64_t spans = 0;
    for (;;) {
        const long n = next(std::span<char>(buffer));
        if (n < 0)
            break;
        decoder.feed(std::string_view(buffer.data(), static_cast<std::size_t>(n)));
        while (auto frame = decoder.next())
            spans += static_cast<std::int64_t>(std::get<agents::Telemetry>(agents::decode(*frame)).spans.size());
    }
    return spans;
}

app::RunRequest request(const planner::Plan& plan)
{
    app::RunRequest r;
    r.plan = plan;
    r.training.steps = 3;
    r.training.data = {agents::DataKind::Synthetic, "", 1234};
    r.training.lr = 1e-3;
    r.threads = 1;
    r.agent_executable = PW_AGENT_EXE;
    return r;
}

/// Seconds from run() to the first step's loss.
double toFirstStep(app::HistoryStore& history, const app::RunRequest& req)
{
    const auto start = Clock::now();
    double first = -1;
    app::RunObserver o;
    o.progress = [&](const app::RunProgress&) {
        if (first < 0)
            first = seconds(start);
    };
    const auto outcome = app::RunController(req, history).run(o);
    if (outcome.status != app::RunStatus::Succeeded)
        std::fprintf(stderr, "run failed: %s\n", outcome.message.c_str());
    return first;
}

} // namespace

int main()
{
    test::TempDir dir;
    // The frames: 1 M spans of a realistic shape.
    const auto frames = dir.path / "telemetry.bin";
    {
        std::ofstream out(frames, std::ios::binary);
        agents::Telemetry t;
        t.agent = "agent 0";
        for (std::int64_t first = 1, seq = 1; first <= kSpans; first += kPerBatch, ++seq) {
            t.seq = seq;
            t.first_span = first;
            t.spans.clear();
            for (int i = 0; i < kPerBatch; ++i) {
                planner::Span s;
                s.device = 1;
                s.kind = i % 2 ? planner::ActionKind::Backward : planner::ActionKind::Forward;
                s.stage = 1;
                s.microbatch = static_cast<std::int32_t>(first + i);
                s.action = static_cast<std::int32_t>(first + i);
                s.t0 = 1000.0 + static_cast<double>(first + i) * 1e-3;
                s.t1 = s.t0 + 7e-4;
                t.spans.push_back(s);
            }
            const auto bytes = agents::encode(t);
            out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        }
    }
    const double mb = static_cast<double>(std::filesystem::file_size(frames)) / 1e6;

    // Baseline: through a local pipe.
    auto start = Clock::now();
    FILE* pipe = ::popen(("cat " + agents::shellQuote(frames.string())).c_str(), "r");
    const auto local = decodeAll([&](std::span<char> b) -> long {
        const auto n = std::fread(b.data(), 1, b.size(), pipe);
        return n > 0 ? static_cast<long>(n) : -1;
    });
    ::pclose(pipe);
    const double localS = seconds(start);

    test::Sshd a, b, c;
    agents::SshSettings settings;
    const auto knownHosts = dir.path / "known_hosts";
    std::ofstream(knownHosts) << a.knownHostsLine() << "\n" << b.knownHostsLine() << "\n" << c.knownHostsLine() << "\n";
    settings.known_hosts = knownHosts;
    settings.config = dir.path / "ssh_config";
    std::ofstream(settings.config).flush();
    auto session = agents::SshSession::open({"127.0.0.1", a.port, test::currentUser(), a.user_key.string()}, settings);
    start = Clock::now();
    auto channel = session->start("cat " + agents::shellQuote(frames.string()));
    const auto remote
        = decodeAll([&](std::span<char> buf) { return channel->read(buf, std::chrono::milliseconds(200)); });
    const double sshS = seconds(start);
    std::printf("telemetry, %lld spans in frames of %d (%.1f MB)\n", static_cast<long long>(kSpans), kPerBatch, mb);
    std::printf("  through an SSH channel (libssh, 127.0.0.1)  %.2f s  %.0f spans/s  (target >= 200000)\n", sshS,
        static_cast<double>(remote) / sshS);
    std::printf("  baseline, a local pipe                       %.2f s  %.0f spans/s  (SSH: %.2fx its time)\n", localS,
        static_cast<double>(local) / localS, sshS / localS);
    if (remote != kSpans || local != kSpans)
        std::printf(
            "  MISMATCH: %lld and %lld spans decoded\n", static_cast<long long>(remote), static_cast<long long>(local));

    // Run to the first step on three loopback hosts.
    planner::Cluster cluster;
    cluster.device_types = {*planner::devicePreset("cpu")};
    for (const test::Sshd* s : {&a, &b, &c}) {
        planner::Node n {
            "h" + std::to_string(s->port), "127.0.0.1", s->port, test::currentUser(), "cpu", 1, 1e10, 1e-6};
        n.ssh_identity_file = s->user_key.string();
        cluster.nodes.push_back(n);
    }
    cluster.inter_node_bandwidth_bytes_per_s = 1e9;
    auto plan = test::gpt2Plan(test::tinyGpt2(2), {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {2}}}, "1f1b", 4);
    plan.cluster = cluster;
    plan.validate();
    auto history = app::HistoryStore::open(dir.path / "history.sqlite");
    const double localFirst = toFirstStep(history, request(plan));
    auto remoteReq = request(plan);
    app::RemoteOptions options;
    options.ssh = settings;
    options.remote_root = (dir.path / "remote").string();
    remoteReq.remote = options;
    const double uploadFirst = toFirstStep(history, remoteReq);
    const double cachedFirst = toFirstStep(history, remoteReq);
    std::printf("run to first step, 3-stage 1F1B plan on three loopback hosts (%.0f MiB agent)\n",
        static_cast<double>(std::filesystem::file_size(PW_AGENT_EXE)) / (1 << 20));
    std::printf("  over SSH, agent uploaded to each host     %.2f s\n", uploadFirst);
    std::printf("  over SSH, agent cached                    %.2f s  (%.1fx the local start)\n", cachedFirst,
        cachedFirst / localFirst);
    std::printf("  baseline, --local agents                  %.2f s\n", localFirst);
    return 0;
}
