// SPDX-License-Identifier: MIT
// Loading a cluster of 100,000 nodes x 8 devices (800,000 devices) from JSON and looking up every device
// (#10 item 3). The baseline, measured in the same run, is nlohmann parsing the same text alone: the floor
// any loader pays. The old lookup (a walk over the nodes per device) is timed on a sample and extrapolated.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "planner/cluster.h"
#include "planner/io/json_file.h"

using namespace pw::planner;
using nlohmann::json;

namespace {

std::string clusterText(int nodes, int perNode)
{
    json list = json::array();
    for (int n = 0; n < nodes; ++n)
        list.push_back({{"name", "n" + std::to_string(n)}, {"device_type", "H100"}, {"count", perNode},
            {"intra_bandwidth_bytes_per_s", 4.5e11}, {"intra_latency_s", 2e-6}});
    json j = {{"format_version", kClusterFormatVersion}, {"name", "big"},
        {"device_types", {{{"name", "H100"}, {"memory_bytes", 80e9}, {"peak_tflops", 989}}}},
        {"nodes", std::move(list)}, {"inter_node_bandwidth_bytes_per_s", 5e10}, {"inter_node_latency_s", 5e-6}};
    return j.dump(2);
}

/// The lookup before #10 item 3: a walk over the nodes until the one holding `index`.
DeviceRef walkLookup(const Cluster& c, int index)
{
    int rest = index;
    for (std::size_t n = 0; n < c.nodes.size(); ++n) {
        if (rest < c.nodes[n].count)
            return {static_cast<int>(n), rest, c.findType(c.nodes[n].device_type)};
        rest -= c.nodes[n].count;
    }
    throw std::out_of_range("device index");
}

} // namespace

int main()
{
    constexpr int kNodes = 100'000, kPerNode = 8;
    const std::string text = clusterText(kNodes, kPerNode);
    const auto path = std::filesystem::temp_directory_path() / "pw_bench_cluster.json";
    std::ofstream(path, std::ios::binary) << text;

    volatile long long sink = 0;
    const double tParse = pw::bench::bestOf(3, [&] { sink = sink + static_cast<long long>(json::parse(text).size()); });
    Cluster cluster;
    const double tLoad = pw::bench::bestOf(3, [&] { cluster = loadCluster(path.string()); });
    const int devices = cluster.deviceCount();
    const double tLookups = pw::bench::bestOf(3, [&] {
        Cluster fresh = cluster;
        fresh.nodes.push_back(fresh.nodes.back()); // a change: the first lookup rebuilds the index
        fresh.nodes.erase(fresh.nodes.end() - 1);
        long long s = 0;
        for (int i = 0; i < fresh.deviceCount(); ++i) {
            auto d = fresh.device(i);
            s += d.node + d.local;
        }
        sink = sink + s;
    });
    constexpr int kSample = 2'000;
    const double tWalkSample = pw::bench::bestOf(1, [&] {
        long long s = 0;
        for (int k = 0; k < kSample; ++k)
            s += walkLookup(cluster, static_cast<int>(static_cast<long long>(k) * devices / kSample)).node;
        sink = sink + s;
    });
    const double tWalk = tWalkSample * devices / kSample;
    std::filesystem::remove(path);

    std::printf("Cluster of %d nodes x %d devices (%d devices, %.1f MB of JSON), best of 3\n", kNodes, kPerNode,
        devices, static_cast<double>(text.size()) / 1e6);
    std::printf("%-46s %10.3f s\n", "baseline: nlohmann parse of the text", tParse);
    std::printf(
        "%-46s %10.3f s   %5.2fx baseline\n", "loadCluster (read, parse, convert, validate)", tLoad, tLoad / tParse);
    std::printf("%-46s %10.3f s   %5.2fx baseline   %7.1f M lookups/s\n", "index + device(i) for every device",
        tLookups, tLookups / tParse, devices / tLookups / 1e6);
    std::printf("%-46s %10.1f s   %5.0fx baseline   (walk, %d lookups extrapolated)\n",
        "before: device(i) walking the nodes", tWalk, tWalk / tParse, kSample);
    std::printf("load + every lookup: %.2fx the parse alone (target: a small constant, independent of size)\n",
        (tLoad + tLookups) / tParse);
    return 0;
}
