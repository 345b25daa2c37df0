// SPDX-License-Identifier: MIT
// Cluster: device types, nodes and links. Heterogeneous clusters are the normal case.
#pragma once

#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pw::planner {

inline constexpr int kClusterFormatVersion = 1;
inline constexpr int kMaxDevices = 1'000'000;

/// @brief A kind of accelerator (or CPU) with its capacity and speed.
struct DeviceType
{
    std::string name;
    double memory_bytes = 0;
    double peak_tflops = 0;
    double memory_bandwidth_bytes_per_s = 0; ///< used for the optimizer step; 0 = free
    /// Speed relative to the profile's device: times are divided by it. Absent: the profile's times
    /// (or the layer's own times for this device type) are used as they are.
    std::optional<double> relative_speed;
    double price_per_hour = 0;
    /// Streams its outputs while it computes (BaPipe's asynchronous execution mode, e.g. FPGA dataflow
    /// accelerators): schedules that overlap a transfer with the op producing it ("1f1b-as") may run on
    /// it. Written to JSON only when true.
    bool streaming_execution = false;
    /// Dense FP8 tensor-core TFLOP/s (the vendor datasheet's, without sparsity); 0: no FP8 tensor cores (A100 and
    /// older), and a profile with FP8 products (`profile transformer --precision fp8`) cannot be made for it.
    double peak_fp8_tflops = 0;

    bool operator==(const DeviceType&) const = default;
};

/// @brief A machine holding `count` devices of one type.
struct Node
{
    std::string name;
    std::string host; ///< for deployment; defaults to the name
    int ssh_port = 22;
    std::string ssh_user;
    std::string device_type;
    int count = 0;
    double intra_bandwidth_bytes_per_s = 0;
    double intra_latency_s = 0;
    /// Independent links from the node to the network (NICs), each of the cluster's inter_node_bandwidth: device k
    /// of the node sends on link k mod inter_node_links, so the node's sends share only their own link (a DGX gives
    /// every GPU its own NIC: 8). 1: one uplink that every device of the node shares.
    int inter_node_links = 1;
    std::string ssh_identity_file; ///< private key for this node; empty: ssh-agent, ~/.ssh/config, default keys
    /// Environment of the agents on this node (CUDA_VISIBLE_DEVICES, NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, ...).
    /// Values may be secrets (tokens, passwords): every file Pipewright writes (plans, projects, the history)
    /// holds only their names, the value replaced by kRedactedValue, unless the name is in env_keep.
    std::map<std::string, std::string> env;
    /// Names of `env` whose values are safe to write to files (e.g. CUDA_VISIBLE_DEVICES).
    std::set<std::string> env_keep;
    /// The CUDA GPU each of the node's devices trains on, in device order: indices among the GPUs its agents see
    /// (after `env`'s CUDA_VISIBLE_DEVICES). An index may repeat: devices sharing a GPU (several stages on one card).
    /// Empty: the node's devices are CPU devices. When given, one entry per device.
    std::vector<int> gpus;

    /// Names of `env` whose value was redacted when the file it came from was written: a deployment needs them
    /// given again (the cluster file the user keeps). Sorted.
    std::vector<std::string> redactedEnv() const;

    bool operator==(const Node&) const = default;
};

/// What a file holds instead of an `env` value that is not in env_keep.
inline constexpr const char* kRedactedValue = "<redacted>";

/// @brief The nodes of a cluster: a std::vector<Node> that also knows, in constant time, how many devices
/// the nodes hold and which node holds device i.
///
/// The index (first device of every node, node of every device) is built once, on the first lookup after
/// a change, in O(nodes + devices); every lookup after that is O(1). Reading through a const NodeList never
/// touches the index. Any non-const access (operator[], at, front, back, begin, end, push_back, insert,
/// erase, ...) may change a count, so it drops the index and the next lookup rebuilds it. A `Node&` taken by
/// a non-const access must therefore not be kept across a lookup and used to change a count afterwards.
/// Lookups on a const NodeList are safe from several threads at once (the rebuild takes a lock).
class NodeList
{
public:
    using value_type = Node;
    using size_type = std::size_t;
    using iterator = std::vector<Node>::iterator;
    using const_iterator = std::vector<Node>::const_iterator;

    NodeList() = default;
    NodeList(std::initializer_list<Node> nodes);
    NodeList(std::vector<Node> nodes); // NOLINT(google-explicit-constructor): a vector of nodes is a NodeList
    NodeList(const NodeList& other);
    NodeList(NodeList&& other) noexcept;
    NodeList& operator=(const NodeList& other);
    NodeList& operator=(NodeList&& other) noexcept;
    ~NodeList() = default;

    // Reading: never touches the index.
    size_type size() const { return m_nodes.size(); }
    bool empty() const { return m_nodes.empty(); }
    const Node& operator[](size_type i) const { return m_nodes[i]; }
    const Node& at(size_type i) const { return m_nodes.at(i); }
    const Node& front() const { return m_nodes.front(); }
    const Node& back() const { return m_nodes.back(); }
    const_iterator begin() const { return m_nodes.begin(); }
    const_iterator end() const { return m_nodes.end(); }
    const_iterator cbegin() const { return m_nodes.cbegin(); }
    const_iterator cend() const { return m_nodes.cend(); }
    const std::vector<Node>& vector() const { return m_nodes; }

    // Writing: drops the index.
    Node& operator[](size_type i) { return changed()[i]; }
    Node& at(size_type i) { return changed().at(i); }
    Node& front() { return changed().front(); }
    Node& back() { return changed().back(); }
    iterator begin() { return changed().begin(); }
    iterator end() { return changed().end(); }
    void push_back(Node node) { changed().push_back(std::move(node)); }
    template <class... Args> Node& emplace_back(Args&&... args)
    {
        return changed().emplace_back(std::forward<Args>(args)...);
    }
    iterator insert(const_iterator pos, Node node) { return changed().insert(pos, std::move(node)); }
    iterator erase(const_iterator pos) { return changed().erase(pos); }
    iterator erase(const_iterator first, const_iterator last) { return changed().erase(first, last); }
    void clear() { changed().clear(); }
    void reserve(size_type n) { m_nodes.reserve(n); }
    void resize(size_type n) { changed().resize(n); }

    /// Devices in all nodes (a node's negative count counts as 0). O(1) once indexed.
    long long deviceCount() const;
    /// Node holding device `index` and its place in the node; {-1, -1} outside [0, deviceCount()). O(1) once
    /// indexed (O(log nodes) beyond kMaxDevices, where no per-device table is kept).
    std::pair<int, int> locate(long long index) const;
    /// Global index of the first device of node `node` (deviceCount() for node == size()).
    long long firstDevice(size_type node) const;
    /// How many times the index was built (for tests: loading and looking up builds it once).
    long long indexBuilds() const { return m_builds.load(std::memory_order_relaxed); }

    friend bool operator==(const NodeList& a, const NodeList& b) { return a.m_nodes == b.m_nodes; }

private:
    struct Index
    {
        std::vector<long long> first; ///< size()+1 prefix sums of the counts
        std::vector<int> nodeOf; ///< node of every device; empty beyond kMaxDevices
    };
    std::vector<Node>& changed()
    {
        m_ready.store(nullptr, std::memory_order_relaxed);
        return m_nodes;
    }
    const Index& index() const;

    std::vector<Node> m_nodes;
    mutable std::shared_ptr<const Index> m_index; ///< shared by copies until one of them changes
    mutable std::atomic<const Index*> m_ready {nullptr}; ///< m_index.get() while it matches m_nodes
    mutable std::mutex m_mutex;
    mutable std::atomic<long long> m_builds {0};
};

/// @brief One device of the cluster, by global index (nodes in order, devices within a node in order).
struct DeviceRef
{
    int node = 0;
    int local = 0;
    int type = 0; ///< index into Cluster::device_types

    bool operator==(const DeviceRef&) const = default;
};

/// @brief A level of PipeDream's hierarchy: `count` components of the level below joined by `bandwidth`.
struct HierarchyLevel
{
    int count = 1;
    double bandwidth_bytes_per_s = 0;

    bool operator==(const HierarchyLevel&) const = default;
};

struct Cluster
{
    std::string name;
    std::vector<DeviceType> device_types;
    NodeList nodes;
    double inter_node_bandwidth_bytes_per_s = 0;
    double inter_node_latency_s = 0;

    int deviceCount() const;
    /// Throws std::out_of_range for a bad index.
    DeviceRef device(int index) const;
    std::vector<DeviceRef> devices() const;
    std::string deviceName(int index) const; ///< "node/gpuK"
    const DeviceType& typeOf(int index) const;
    int findType(const std::string& name) const; ///< -1 when absent

    bool sameNode(int a, int b) const;
    double bandwidth(int a, int b) const; ///< bytes/s of the link between two devices
    double latency(int a, int b) const;
    /// Bandwidth that bounds a ring collective among `group` (the slowest link it crosses).
    double groupBandwidth(const std::vector<int>& group) const;
    double groupLatency(const std::vector<int>& group) const;
    bool isHomogeneous() const; ///< one device type and equal node sizes
    /// This cluster with its first `count` nodes only (without copying the rest: a search makes one per candidate).
    Cluster firstNodes(int count) const;

    /// PipeDream levels, innermost first: (devices per node, intra bw), (nodes, inter bw). One level when
    /// there is one node. Throws InputError when nodes differ in size.
    std::vector<HierarchyLevel> hierarchy() const;

    void validate() const;

    bool operator==(const Cluster&) const = default;
};

/// A device type as cluster and offer files write it (peak_fp8_tflops, relative_speed and streaming_execution only
/// where set).
nlohmann::json toJson(const DeviceType& type);
nlohmann::json toJson(const Cluster& cluster);
Cluster clusterFromJson(const nlohmann::json& j);

} // namespace pw::planner
