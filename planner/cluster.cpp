// SPDX-License-Identifier: MIT
#include "cluster.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "json_fields.h"

namespace pw::planner {

using nlohmann::json;

NodeList::NodeList(std::initializer_list<Node> nodes)
    : m_nodes(nodes)
{
}

NodeList::NodeList(std::vector<Node> nodes)
    : m_nodes(std::move(nodes))
{
}

NodeList::NodeList(const NodeList& other)
    : m_nodes(other.m_nodes)
{
    std::lock_guard lock(other.m_mutex);
    if (other.m_ready.load(std::memory_order_acquire)) {
        m_index = other.m_index;
        m_ready.store(m_index.get(), std::memory_order_release);
    }
}

NodeList::NodeList(NodeList&& other) noexcept
    : m_nodes(std::move(other.m_nodes))
{
    if (other.m_ready.load(std::memory_order_acquire)) {
        m_index = std::move(other.m_index);
        m_ready.store(m_index.get(), std::memory_order_release);
    }
    other.m_ready.store(nullptr, std::memory_order_relaxed);
}

NodeList& NodeList::operator=(const NodeList& other)
{
    if (this != &other)
        *this = NodeList(other);
    return *this;
}

NodeList& NodeList::operator=(NodeList&& other) noexcept
{
    if (this == &other)
        return *this;
    m_nodes = std::move(other.m_nodes);
    const bool ready = other.m_ready.load(std::memory_order_acquire) != nullptr;
    m_index = ready ? std::move(other.m_index) : nullptr;
    m_ready.store(ready ? m_index.get() : nullptr, std::memory_order_release);
    other.m_ready.store(nullptr, std::memory_order_relaxed);
    return *this;
}

const NodeList::Index& NodeList::index() const
{
    if (const Index* ready = m_ready.load(std::memory_order_acquire))
        return *ready;
    std::lock_guard lock(m_mutex);
    if (const Index* ready = m_ready.load(std::memory_order_acquire))
        return *ready;
    auto index = std::make_shared<Index>();
    index->first.resize(m_nodes.size() + 1, 0);
    for (std::size_t n = 0; n < m_nodes.size(); ++n)
        index->first[n + 1] = index->first[n] + std::max(m_nodes[n].count, 0);
    // A per-device table only for clusters validate() accepts; a larger (invalid) one is searched instead.
    if (index->first.back() <= kMaxDevices) {
        index->nodeOf.reserve(static_cast<std::size_t>(index->first.back()));
        for (std::size_t n = 0; n < m_nodes.size(); ++n)
            index->nodeOf.insert(index->nodeOf.end(), std::max(m_nodes[n].count, 0), static_cast<int>(n));
    }
    m_index = std::move(index);
    m_builds.fetch_add(1, std::memory_order_relaxed);
    m_ready.store(m_index.get(), std::memory_order_release);
    return *m_index;
}

long long NodeList::deviceCount() const
{
    return index().first.back();
}

long long NodeList::firstDevice(size_type node) const
{
    return index().first.at(node);
}

std::pair<int, int> NodeList::locate(long long device) const
{
    const Index& ix = index();
    if (device < 0 || device >= ix.first.back())
        return {-1, -1};
    int node = 0;
    if (!ix.nodeOf.empty()) {
        node = ix.nodeOf[static_cast<std::size_t>(device)];
    } else {
        auto it = std::upper_bound(ix.first.begin(), ix.first.end(), device);
        node = static_cast<int>(it - ix.first.begin()) - 1;
    }
    return {node, static_cast<int>(device - ix.first[static_cast<std::size_t>(node)])};
}

int Cluster::deviceCount() const
{
    return static_cast<int>(std::min<long long>(nodes.deviceCount(), std::numeric_limits<int>::max()));
}

DeviceRef Cluster::device(int index) const
{
    auto [node, local] = nodes.locate(index);
    if (node < 0)
        throw std::out_of_range("device index " + std::to_string(index) + " outside the cluster's "
            + std::to_string(deviceCount()) + " devices");
    return {node, local, findType(nodes[static_cast<std::size_t>(node)].device_type)};
}

std::vector<DeviceRef> Cluster::devices() const
{
    std::vector<DeviceRef> out;
    for (std::size_t n = 0; n < nodes.size(); ++n) {
        int type = findType(nodes[n].device_type);
        for (int k = 0; k < nodes[n].count; ++k)
            out.push_back({static_cast<int>(n), k, type});
    }
    return out;
}

std::string Cluster::deviceName(int index) const
{
    auto d = device(index);
    return nodes[d.node].name + "/" + (nodes[d.node].device_type == "cpu" ? "cpu" : "gpu") + std::to_string(d.local);
}

const DeviceType& Cluster::typeOf(int index) const
{
    auto d = device(index);
    if (d.type < 0)
        throw InputError({}, 0, "/nodes/" + std::to_string(d.node) + "/device_type",
            "unknown device type '" + nodes[d.node].device_type + "'");
    return device_types[d.type];
}

int Cluster::findType(const std::string& name) const
{
    for (std::size_t i = 0; i < device_types.size(); ++i)
        if (device_types[i].name == name)
            return static_cast<int>(i);
    return -1;
}

bool Cluster::sameNode(int a, int b) const
{
    return device(a).node == device(b).node;
}

double Cluster::bandwidth(int a, int b) const
{
    auto da = device(a), db = device(b);
    return da.node == db.node ? nodes[da.node].intra_bandwidth_bytes_per_s : inter_node_bandwidth_bytes_per_s;
}

double Cluster::latency(int a, int b) const
{
    auto da = device(a), db = device(b);
    return da.node == db.node ? nodes[da.node].intra_latency_s : inter_node_latency_s;
}

namespace {
/// The node of device d (the node alone: no device-type lookup by name; device() throws for an index outside).
int nodeOf(const Cluster& c, int d)
{
    const int node = c.nodes.locate(d).first;
    return node >= 0 ? node : c.device(d).node;
}

/// @brief The links a ring among a group crosses: the slowest own link of a node holding two or more members and
/// whether the group spans nodes.
struct GroupLinks
{
    double intra_bandwidth = INFINITY; ///< INFINITY: no node holds two members
    double intra_latency = 0;
    bool spans_nodes = false;
};

/// One pass without allocating where the members come node by node (the planner asks about groups of thousands of
/// devices, data-parallel groups at 16,384 GPUs, many times over); else sorted node numbers.
GroupLinks groupLinks(const Cluster& c, const std::vector<int>& group)
{
    GroupLinks links;
    const auto shared = [&](int node) {
        links.intra_bandwidth = std::min(links.intra_bandwidth, c.nodes[node].intra_bandwidth_bytes_per_s);
        links.intra_latency = std::max(links.intra_latency, c.nodes[node].intra_latency_s);
    };
    int previous = -1;
    bool ordered = true;
    for (int d : group) {
        const int node = nodeOf(c, d);
        if (node < previous) {
            ordered = false;
            break;
        }
        if (node == previous)
            shared(node);
        else if (previous >= 0)
            links.spans_nodes = true;
        previous = node;
    }
    if (ordered)
        return links;
    links = {};
    std::vector<int> nodes;
    nodes.reserve(group.size());
    for (int d : group)
        nodes.push_back(nodeOf(c, d));
    std::sort(nodes.begin(), nodes.end());
    for (std::size_t i = 1; i < nodes.size(); ++i)
        if (nodes[i] == nodes[i - 1])
            shared(nodes[i]);
        else
            links.spans_nodes = true;
    return links;
}
} // namespace

double Cluster::groupBandwidth(const std::vector<int>& group) const
{
    if (group.size() < 2)
        return 0;
    // A node's own links count only when at least two members sit on it.
    const auto links = groupLinks(*this, group);
    return links.spans_nodes ? std::min(links.intra_bandwidth, inter_node_bandwidth_bytes_per_s)
                             : links.intra_bandwidth;
}

double Cluster::groupLatency(const std::vector<int>& group) const
{
    if (group.size() < 2)
        return 0;
    const auto links = groupLinks(*this, group);
    return links.spans_nodes ? std::max(links.intra_latency, inter_node_latency_s) : links.intra_latency;
}

Cluster Cluster::firstNodes(int count) const
{
    const auto n = static_cast<std::ptrdiff_t>(std::clamp<std::size_t>(count, 0, nodes.size()));
    // Every field but the nodes, then those kept (a field added to Cluster must be added here: the size check below).
    static_assert(sizeof(Cluster)
            == sizeof(std::string) + sizeof(std::vector<DeviceType>) + sizeof(NodeList) + 2 * sizeof(double),
        "Cluster::firstNodes copies every field of Cluster");
    Cluster c;
    c.name = name;
    c.device_types = device_types;
    c.nodes = std::vector<Node>(nodes.begin(), nodes.begin() + n);
    c.inter_node_bandwidth_bytes_per_s = inter_node_bandwidth_bytes_per_s;
    c.inter_node_latency_s = inter_node_latency_s;
    return c;
}

bool Cluster::isHomogeneous() const
{
    if (nodes.empty())
        return true;
    for (const auto& n : nodes)
        if (n.device_type != nodes[0].device_type || n.count != nodes[0].count)
            return false;
    return true;
}

std::vector<HierarchyLevel> Cluster::hierarchy() const
{
    if (nodes.empty())
        throw InputError({}, 0, "/nodes", "the cluster has no nodes");
    for (std::size_t i = 1; i < nodes.size(); ++i)
        if (nodes[i].count != nodes[0].count)
            throw InputError({}, 0, "/nodes/" + std::to_string(i) + "/count",
                "PipeDream's hierarchy needs nodes of equal size (node '" + nodes[i].name + "' has "
                    + std::to_string(nodes[i].count) + " devices, '" + nodes[0].name + "' has "
                    + std::to_string(nodes[0].count) + "); plan with --flat instead");
    double intra = INFINITY;
    for (const auto& n : nodes)
        intra = std::min(intra, n.intra_bandwidth_bytes_per_s);
    std::vector<HierarchyLevel> levels {{nodes[0].count, intra}};
    if (nodes.size() > 1)
        levels.push_back({static_cast<int>(nodes.size()), inter_node_bandwidth_bytes_per_s});
    return levels;
}

namespace {
/// A link bandwidth is 0 (no link) or at least 1 byte/s: below that, transfer times overflow to infinity and
/// the value is almost surely in the wrong unit (#10 item 4).
void checkBandwidth(double bytesPerS, const std::string& field)
{
    if (bytesPerS > 0 && bytesPerS < 1)
        throw InputError({}, 0, field,
            "must be 0 or at least 1 byte/s, got " + std::to_string(bytesPerS)
                + " (bandwidths are in bytes/s: 1e10 is 10 GB/s)");
}
} // namespace

void Cluster::validate() const
{
    if (device_types.empty())
        throw InputError({}, 0, "/device_types", "a cluster needs at least one device type");
    std::set<std::string> typeNames;
    for (std::size_t i = 0; i < device_types.size(); ++i) {
        const auto& t = device_types[i];
        auto path = "/device_types/" + std::to_string(i);
        if (t.name.empty())
            throw InputError({}, 0, path + "/name", "must not be empty");
        if (!typeNames.insert(t.name).second)
            throw InputError({}, 0, path + "/name", "device type '" + t.name + "' is defined twice");
        if (!(t.memory_bytes > 0))
            throw InputError({}, 0, path + "/memory_bytes", "must be > 0");
        if (t.relative_speed && !(*t.relative_speed > 0))
            throw InputError({}, 0, path + "/relative_speed", "must be > 0");
        checkBandwidth(t.memory_bandwidth_bytes_per_s, path + "/memory_bandwidth_bytes_per_s");
    }
    if (nodes.empty())
        throw InputError({}, 0, "/nodes", "a cluster needs at least one node");
    std::set<std::string> nodeNames;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const auto& n = nodes[i];
        auto path = "/nodes/" + std::to_string(i);
        if (n.name.empty())
            throw InputError({}, 0, path + "/name", "must not be empty");
        if (!nodeNames.insert(n.name).second)
            throw InputError({}, 0, path + "/name", "node '" + n.name + "' is defined twice");
        if (findType(n.device_type) < 0)
            throw InputError({}, 0, path + "/device_type", "unknown device type '" + n.device_type + "'");
        if (n.count < 1)
            throw InputError(
                {}, 0, path + "/count", "a node needs at least one device, got " + std::to_string(n.count));
        if (n.inter_node_links < 1 || n.inter_node_links > n.count)
            throw InputError({}, 0, path + "/inter_node_links",
                "must be 1 to the node's " + std::to_string(n.count) + " devices, got "
                    + std::to_string(n.inter_node_links));
        if (n.count > 1 && !(n.intra_bandwidth_bytes_per_s > 0))
            throw InputError(
                {}, 0, path + "/intra_bandwidth_bytes_per_s", "must be > 0 for a node with several devices");
        checkBandwidth(n.intra_bandwidth_bytes_per_s, path + "/intra_bandwidth_bytes_per_s");
        if (n.ssh_port < 1 || n.ssh_port > 65535)
            throw InputError({}, 0, path + "/ssh_port", "must be a TCP port");
        if (!n.gpus.empty() && static_cast<long long>(n.gpus.size()) != n.count)
            throw InputError({}, 0, path + "/gpus",
                "lists " + std::to_string(n.gpus.size()) + " GPUs for the node's " + std::to_string(n.count)
                    + " devices: give one CUDA device index per device (repeat one for devices sharing a GPU)");
        for (std::size_t k = 0; k < n.gpus.size(); ++k)
            if (n.gpus[k] < 0)
                throw InputError({}, 0, path + "/gpus/" + std::to_string(k), "must be a CUDA device index >= 0");
    }
    long long total = 0;
    for (const auto& n : nodes)
        total += n.count;
    if (total > kMaxDevices)
        throw InputError({}, 0, "/nodes",
            "at most " + std::to_string(kMaxDevices) + " devices in a cluster, got " + std::to_string(total));
    checkBandwidth(inter_node_bandwidth_bytes_per_s, "/inter_node_bandwidth_bytes_per_s");
    if (nodes.size() > 1 && !(inter_node_bandwidth_bytes_per_s > 0))
        throw InputError({}, 0, "/inter_node_bandwidth_bytes_per_s", "must be > 0 for a cluster of several nodes");
}

json toJson(const DeviceType& t)
{
    json jt = {{"name", t.name}, {"memory_bytes", t.memory_bytes}, {"peak_tflops", t.peak_tflops},
        {"memory_bandwidth_bytes_per_s", t.memory_bandwidth_bytes_per_s}, {"price_per_hour", t.price_per_hour}};
    if (t.peak_fp8_tflops > 0)
        jt["peak_fp8_tflops"] = t.peak_fp8_tflops;
    if (t.relative_speed)
        jt["relative_speed"] = *t.relative_speed;
    if (t.streaming_execution)
        jt["streaming_execution"] = true;
    return jt;
}

json toJson(const Cluster& c)
{
    json types = json::array();
    for (const auto& t : c.device_types) {
        types.push_back(toJson(t));
    }
    json nodes = json::array();
    for (const auto& n : c.nodes) {
        json jn = {{"name", n.name}, {"host", n.host}, {"ssh_port", n.ssh_port}, {"ssh_user", n.ssh_user},
            {"device_type", n.device_type}, {"count", n.count},
            {"intra_bandwidth_bytes_per_s", n.intra_bandwidth_bytes_per_s}, {"intra_latency_s", n.intra_latency_s}};
        if (n.inter_node_links != 1)
            jn["inter_node_links"] = n.inter_node_links;
        if (!n.ssh_identity_file.empty())
            jn["ssh_identity_file"] = n.ssh_identity_file;
        if (!n.env.empty()) {
            json env = json::object();
            for (const auto& [name, value] : n.env)
                env[name] = n.env_keep.contains(name) ? value : std::string(kRedactedValue);
            jn["env"] = std::move(env);
        }
        if (!n.env_keep.empty())
            jn["env_keep"] = n.env_keep;
        if (!n.gpus.empty())
            jn["gpus"] = n.gpus;
        nodes.push_back(std::move(jn));
    }
    return {{"format_version", kClusterFormatVersion}, {"name", c.name}, {"device_types", std::move(types)},
        {"nodes", std::move(nodes)}, {"inter_node_bandwidth_bytes_per_s", c.inter_node_bandwidth_bytes_per_s},
        {"inter_node_latency_s", c.inter_node_latency_s}};
}

std::vector<std::string> Node::redactedEnv() const
{
    std::vector<std::string> out;
    for (const auto& [name, value] : env)
        if (value == kRedactedValue)
            out.push_back(name);
    return out;
}

Cluster clusterFromJson(const json& j)
{
    namespace f = fields;
    f::object(j, "");
    f::checkVersion(j, "cluster", kClusterFormatVersion);
    Cluster c;
    c.name = f::stringOr(j, "name", "", "cluster");
    const auto& types = f::array(j, "device_types", "");
    for (std::size_t i = 0; i < types.size(); ++i) {
        auto path = f::child("/device_types", i);
        const auto& jt = f::object(types[i], path);
        DeviceType t;
        t.name = f::string(jt, "name", path);
        t.memory_bytes = f::number(jt, "memory_bytes", path);
        if (!(t.memory_bytes > 0)) // as the cluster editor says it
            f::fail(f::child(path, "memory_bytes"), "must be > 0 bytes, got " + jt.at("memory_bytes").dump());
        t.peak_tflops = f::nonNegativeOr(jt, "peak_tflops", path, 0);
        t.peak_fp8_tflops = f::nonNegativeOr(jt, "peak_fp8_tflops", path, 0);
        t.memory_bandwidth_bytes_per_s = f::nonNegativeOr(jt, "memory_bandwidth_bytes_per_s", path, 0);
        t.relative_speed = f::optionalNumber(jt, "relative_speed", path);
        t.price_per_hour = f::nonNegativeOr(jt, "price_per_hour", path, 0);
        t.streaming_execution = f::booleanOr(jt, "streaming_execution", path, false);
        c.device_types.push_back(std::move(t));
    }
    const auto& nodes = f::array(j, "nodes", "");
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        auto path = f::child("/nodes", i);
        const auto& jn = f::object(nodes[i], path);
        Node n;
        n.name = f::string(jn, "name", path);
        n.host = f::stringOr(jn, "host", path, n.name);
        n.ssh_port = f::integerOr(jn, "ssh_port", path, 22);
        n.ssh_user = f::stringOr(jn, "ssh_user", path, "");
        n.ssh_identity_file = f::stringOr(jn, "ssh_identity_file", path, "");
        if (jn.contains("env")) {
            const auto& env = f::object(jn.at("env"), path + "/env");
            for (const auto& [name, value] : env.items()) {
                if (!value.is_string())
                    throw InputError({}, 0, path + "/env/" + name, "must be a string");
                if (name.empty()
                    || name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
                        != std::string::npos
                    || (name[0] >= '0' && name[0] <= '9'))
                    throw InputError({}, 0, path + "/env/" + name, "is not an environment variable name");
                n.env[name] = value.get<std::string>();
            }
        }
        if (jn.contains("env_keep")) {
            const auto& keep = f::array(jn, "env_keep", path);
            for (std::size_t k = 0; k < keep.size(); ++k) {
                if (!keep[k].is_string())
                    throw InputError({}, 0, f::child(path + "/env_keep", k), "must be a variable name (a string)");
                n.env_keep.insert(keep[k].get<std::string>());
            }
        }
        if (jn.contains("gpus")) {
            const auto& gpus = f::array(jn, "gpus", path);
            for (std::size_t k = 0; k < gpus.size(); ++k) {
                // Range-checked here: a huge number must not wrap into a valid index.
                if (!gpus[k].is_number_integer() || gpus[k].get<long long>() < 0
                    || gpus[k].get<long long>() > kMaxDevices)
                    throw InputError(
                        {}, 0, f::child(path + "/gpus", k), "must be a CUDA device index (an integer >= 0)");
                n.gpus.push_back(gpus[k].get<int>());
            }
        }
        n.device_type = f::string(jn, "device_type", path);
        n.count = f::integer(jn, "count", path);
        n.intra_bandwidth_bytes_per_s = f::nonNegativeOr(jn, "intra_bandwidth_bytes_per_s", path, 0);
        n.intra_latency_s = f::nonNegativeOr(jn, "intra_latency_s", path, 0);
        n.inter_node_links = f::integerOr(jn, "inter_node_links", path, 1);
        c.nodes.push_back(std::move(n));
    }
    c.inter_node_bandwidth_bytes_per_s = f::nonNegativeOr(j, "inter_node_bandwidth_bytes_per_s", "", 0);
    c.inter_node_latency_s = f::nonNegativeOr(j, "inter_node_latency_s", "", 0);
    c.validate();
    return c;
}

} // namespace pw::planner
