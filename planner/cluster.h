// SPDX-License-Identifier: MIT
// Cluster: device types, nodes and links. Heterogeneous clusters are the normal case.
#pragma once

#include <optional>
#include <string>
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

    bool operator==(const Node&) const = default;
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
    std::vector<Node> nodes;
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

    /// PipeDream levels, innermost first: (devices per node, intra bw), (nodes, inter bw). One level when
    /// there is one node. Throws InputError when nodes differ in size.
    std::vector<HierarchyLevel> hierarchy() const;

    void validate() const;

    bool operator==(const Cluster&) const = default;
};

nlohmann::json toJson(const Cluster& cluster);
Cluster clusterFromJson(const nlohmann::json& j);

} // namespace pw::planner
