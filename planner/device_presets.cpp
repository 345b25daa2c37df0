// SPDX-License-Identifier: MIT
// The table of known device types, with the source of every number next to it.
#include "device_presets.h"

#include <cctype>
#include <string>

namespace pw::planner {

namespace {

// Memory sizes are the marketed "GB" read as GiB: HBM and GDDR capacities are binary (an A100 80GB
// reports 81920 MiB). The driver keeps a few hundred MiB of that for itself.
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGBps = 1e9;

DeviceType preset(
    const char* name, double memoryGiB, double peakTflops, double bandwidthGBps, double price, double peakFp8Tflops = 0)
{
    DeviceType t;
    t.name = name;
    t.memory_bytes = memoryGiB * kGiB;
    t.peak_tflops = peakTflops;
    t.peak_fp8_tflops = peakFp8Tflops;
    t.memory_bandwidth_bytes_per_s = bandwidthGBps * kGBps;
    t.price_per_hour = price;
    return t;
}

// HetPipe Table 1 lists CUDA cores and boost clock but no TFLOPS. Peak FP32 = cores x 2 FLOP x boost clock
// (HetPipe trained in FP32). These peaks rank TITAN RTX above TITAN V, while the paper measured
// V > R > G > Q, so plans for HetPipe's cluster should use measured per-layer times, not these peaks.
double fp32Peak(int cudaCores, double boostMHz)
{
    return cudaCores * 2.0 * boostMHz * 1e6 / 1e12;
}

std::string normalized(std::string_view name)
{
    std::string out;
    for (char c : name)
        if (c != ' ' && c != '-' && c != '_')
            out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // Vendor and product-line prefixes people type or tools print ("NVIDIA GeForce RTX 2060", "Tesla V100",
    // "AMD Instinct MI300X").
    for (std::string_view prefix : {"nvidia", "geforce", "tesla", "amd", "instinct"})
        if (out.size() > prefix.size() && out.compare(0, prefix.size(), prefix) == 0)
            out.erase(0, prefix.size());
    // Form factors and memory kinds nvidia-smi prints ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"): the SXM
    // parts are the presets without a suffix; the 80 GB A100 and H100 too (the 40 GB A100 and the PCIe H100 differ).
    for (std::string_view token : {"sxm5", "sxm4", "sxm", "hbm3e", "hbm3", "hbm2e"})
        if (const auto at = out.find(token); at != std::string::npos && at > 0)
            out.erase(at, token.size());
    for (std::string_view base : {"a100", "h100"})
        if (out == std::string(base) + "80gb")
            out = base;
    return out;
}

} // namespace

const std::vector<DeviceType>& devicePresets()
{
    // Peak = dense 16-bit tensor-core TFLOPS for data-centre GPUs (what Megatron's % of peak uses), FP32 for
    // HetPipe's GPUs and the CPU. price_per_hour: rough public list price of one on-demand cloud GPU
    // (2025-26 specialised-cloud rates for H100/H200/A100; 2020 GCP list price for V100, as quoted in the
    // Gavel digest); 0 where no cloud rents the device. Prices move often: treat them as defaults to edit.
    static const std::vector<DeviceType> presets = {
        // Vendor datasheets, dense (no sparsity) BF16 tensor-core peaks at boost clock:
        // The last number is the dense FP8 peak (the datasheets quote twice it "with sparsity"); 0 where the device
        // has no FP8 tensor cores.
        preset("H100", 80, 989, 3350, 3.00, 1978.9), // H100 SXM5 80 GB, HBM3, 132 SMs, 700 W
        preset("H100 PCIe", 80, 756, 2000, 2.50, 1513), // 114 SMs at 350 W, HBM2e 2.0 TB/s
        preset("H200", 141, 989, 4800, 3.80, 1978.9), // SXM5 141 GB, HBM3e; same compute as H100
        preset("A100", 80, 312, 2039, 1.80), // SXM4 80 GB, HBM2e (312 TFLOPS is Megatron's peak); no FP8
        preset("A100 40GB", 40, 312, 1555, 1.30), // SXM4 40 GB, HBM2
        // HGX B200: 2.25 PFLOPS dense BF16, 4.5 dense FP8, 180 GB HBM3e (DGX B200: 1,440 GB / 8)
        preset("B200", 180, 2250, 8000, 6.00, 4500),
        // AMD Instinct MI300X: 1307.4 TFLOPS dense BF16, 2614.9 dense FP8, 192 GB HBM3
        preset("MI300X", 192, 1307.4, 5300, 2.50, 2614.9),
        preset("V100", 16, 125, 900, 2.48), // 16 GB as in the PipeDream papers
        preset("TITAN V", 12, fp32Peak(5120, 1455), 653, 0), // HetPipe Table 1: 2017, Volta -> 14.9 TFLOPS
        preset("TITAN RTX", 24, fp32Peak(4608, 1770), 672, 0), // 2018, Turing -> 16.3 TFLOPS
        preset("RTX 2060", 6, fp32Peak(1920, 1680), 336, 0), // GeForce, 2019, Turing -> 6.45 TFLOPS
        preset("Quadro P4000", 8, fp32Peak(1792, 1480), 243, 0), // 2017, Pascal -> 5.30 TFLOPS
        // A rough figure, not a measurement: FP32 GEMM on two AVX2/AVX-512 cores (~50 GFLOPS each) with 16 GiB
        // and ~20 GB/s of memory bandwidth, the kind of machine CI and the CPU engine run on.
        preset("cpu", 16, 0.1, 20, 0),
    };
    return presets;
}

std::optional<DeviceType> devicePreset(std::string_view name)
{
    const std::string key = normalized(name);
    if (key.empty())
        return std::nullopt;
    for (const auto& t : devicePresets())
        if (normalized(t.name) == key)
            return t;
    return std::nullopt;
}

int defaultBytesPerElement(const DeviceType& device)
{
    const auto preset = devicePreset(device.name);
    return preset && preset->name == "cpu" ? 4 : 2;
}

double peakFp8Tflops(const DeviceType& device)
{
    if (device.peak_fp8_tflops > 0)
        return device.peak_fp8_tflops;
    const auto preset = devicePreset(device.name);
    return preset ? preset->peak_fp8_tflops : 0.0;
}

} // namespace pw::planner
