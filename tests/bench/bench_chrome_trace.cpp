// SPDX-License-Identifier: MIT
// Chrome trace export of a one-million-action schedule (#10 item 7): events per second and the extra peak
// memory of the streaming writer. Baselines measured in the same run: writing the same bytes from memory
// (raw write speed, the floor), and the shape of the export before #10: the whole trace as an nlohmann
// document, then dumped (here built by parsing the streamed text, so its time is only indicative; its memory
// is what the document costs).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "planner/io/chrome_trace.h"
#include "planner/sim/simulator.h"

using namespace pw::planner;

namespace {

/// A field of /proc/self/status in MiB ("VmRSS", "VmHWM"); 0 where it is not available.
double statusMiB(const std::string& field)
{
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(field + ":", 0) == 0)
            return std::stod(line.substr(field.size() + 1)) / 1024.0; // kB
    return 0;
}

/// Runs `fn` once and returns {seconds, extra peak resident memory in MiB over what was resident before}.
std::pair<double, double> measure(const std::function<void()>& fn)
{
    std::ofstream("/proc/self/clear_refs") << "5"; // resets VmHWM to the current RSS (Linux >= 4.0)
    const double before = statusMiB("VmRSS");
    const double seconds = pw::bench::bestOf(1, fn);
    return {seconds, statusMiB("VmHWM") - before};
}

std::size_t lines(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::size_t n = 0;
    char buffer[1 << 16];
    while (in.read(buffer, sizeof buffer) || in.gcount() > 0)
        for (std::streamsize i = 0; i < in.gcount(); ++i)
            n += buffer[i] == '\n';
    return n;
}

} // namespace

int main()
{
    const auto dir = std::filesystem::temp_directory_path();
    const std::string streamed = (dir / "pw_bench_trace_stream.json").string();
    const std::string copied = (dir / "pw_bench_trace_copy.json").string();
    const std::string dom = (dir / "pw_bench_trace_dom.json").string();

    std::printf("Chrome trace export of a simulated 1F1B plan (64 stages), one run each\n");
    std::printf("%-12s %9s %9s %10s %11s %12s %12s %12s %10s\n", "microbatches", "spans", "events", "MB", "stream",
        "events/s", "extra peak", "raw write", "stream/raw");
    for (int microbatches : {1450, 2900}) {
        Plan plan = pw::test::chainPlan(64, microbatches);
        const SimulationResult sim = simulate(plan);
        const Timeline& timeline = sim.timeline;

        const auto [tStream, memStream] = measure([&] { writeChromeTraceFile(streamed, timeline); });
        const std::size_t events = lines(streamed) - 1; // one event per line, plus the closing line
        const double mb = static_cast<double>(std::filesystem::file_size(streamed)) / 1e6;

        std::string bytes;
        {
            std::ifstream in(streamed, std::ios::binary);
            std::ostringstream s;
            s << in.rdbuf();
            bytes = s.str();
        }
        const double tRaw = pw::bench::bestOf(3, [&] {
            std::ofstream out(copied, std::ios::binary | std::ios::trunc);
            out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        });
        bytes.clear();
        bytes.shrink_to_fit();
        std::printf("%-12d %9zu %9zu %10.1f %9.2f s %10.2f M %9.0f MiB %10.2f s %9.2fx\n", microbatches,
            timeline.spans.size(), events, mb, tStream, events / tStream / 1e6, memStream, tRaw, tStream / tRaw);

        if (microbatches == 2900) {
            const auto [tDom, memDom] = measure([&] {
                const nlohmann::json j = chromeTrace(timeline);
                std::ofstream(dom, std::ios::binary) << j.dump(-1);
            });
            std::printf("as a JSON document, then dumped (before #10): %.2f s, %.2f M events/s, %.0f MiB extra peak: "
                        "streaming is %.1fx faster with %.0fx less extra memory\n",
                tDom, events / tDom / 1e6, memDom, tDom / tStream, memDom / std::max(memStream, 1.0));
        }
    }
    for (const auto& p : {streamed, copied, dom})
        std::filesystem::remove(p);
    std::printf("targets: >= 1 M events/s; extra peak memory a few bytes per span, none per byte written\n");
    return 0;
}
