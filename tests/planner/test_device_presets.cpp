// SPDX-License-Identifier: MIT
// Tests of the device preset table: HetPipe Table 1, the data-centre GPUs and loose name matching.
#include <catch2/catch.hpp>

#include "planner/device_presets.h"

using namespace pw::planner;

TEST_CASE("Device presets carry the papers' numbers and match names loosely", "[device_presets]")
{
    auto titanV = devicePreset("titan v");
    REQUIRE(titanV);
    CHECK(titanV->name == "TITAN V");
    CHECK(titanV->peak_tflops == Approx(14.8992)); // 5120 cores x 2 x 1455 MHz
    CHECK(titanV->memory_bytes == 12.0 * (1 << 30));
    CHECK(titanV->memory_bandwidth_bytes_per_s == 653e9);
    CHECK(devicePreset("TITAN RTX")->peak_tflops == Approx(16.31232));
    CHECK(devicePreset("NVIDIA GeForce RTX 2060")->peak_tflops == Approx(6.4512));
    CHECK(devicePreset("quadro-p4000")->memory_bytes == 8.0 * (1 << 30));
    CHECK(devicePreset("Tesla V100")->peak_tflops == 125);
    CHECK(devicePreset("A100")->peak_tflops == 312);
    CHECK(devicePreset("H200")->memory_bandwidth_bytes_per_s == 4.8e12);
    CHECK(devicePreset("CPU")->peak_tflops == Approx(0.1));
    // Datasheet dense BF16 peaks and memory (issue 31 item 4).
    CHECK(devicePreset("B200")->peak_tflops == 2250);
    CHECK(devicePreset("AMD Instinct MI300X")->peak_tflops == Approx(1307.4));
    CHECK(devicePreset("MI300X")->memory_bytes == 192.0 * (1 << 30));
    CHECK(devicePreset("H100 PCIe")->peak_tflops == 756);
    CHECK(devicePreset("A100 40GB")->memory_bandwidth_bytes_per_s == 1555e9);
    // What nvidia-smi prints finds the preset.
    CHECK(devicePreset("NVIDIA H100 80GB HBM3")->name == "H100");
    CHECK(devicePreset("H100 SXM5")->name == "H100");
    CHECK(devicePreset("NVIDIA A100-SXM4-80GB")->name == "A100");
    CHECK(devicePreset("NVIDIA A100-SXM4-40GB")->name == "A100 40GB");
    CHECK(devicePreset("NVIDIA H100 PCIe")->name == "H100 PCIe");
    CHECK_FALSE(devicePreset("TPU v5p"));
    CHECK_FALSE(devicePreset(""));
    for (const auto& t : devicePresets()) {
        INFO(t.name);
        CHECK(t.memory_bytes > 0);
        CHECK(t.peak_tflops > 0);
        CHECK(t.memory_bandwidth_bytes_per_s > 0);
        CHECK(t.price_per_hour >= 0);
        CHECK(devicePreset(t.name)->name == t.name);
    }
}
