// SPDX-License-Identifier: MIT
// ModelProfile: JSON round trip, validation errors naming the field, cut bytes of graphs.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "planner/errors.h"
#include "planner/model_profile.h"

using namespace pw::planner;
using nlohmann::json;

TEST_CASE("model JSON accepts the fixed contract and round-trips", "[model]")
{
    json j = {{"name", "tiny"},
        {"layers",
            {{{"name", "a"}, {"forward_ms", 1.0}, {"backward_ms", 2.0}, {"activation_bytes", 10}, {"weight_bytes", 4}},
                {{"name", "b"}, {"forward_ms", 3.0}, {"backward_ms", 6.0}, {"activation_bytes", 20},
                    {"weight_bytes", 8}}}}};
    auto m = modelFromJson(j);
    REQUIRE(m.layerCount() == 2);
    CHECK(m.layers[1].backward_ms == 6.0);
    CHECK(m.totalWeightBytes() == 12);
    auto again = modelFromJson(toJson(m));
    CHECK(toJson(again) == toJson(m));
}

TEST_CASE("model validation names the bad field", "[model]")
{
    json j = {{"layers",
        {{{"name", "a"}, {"forward_ms", -1.0}, {"backward_ms", 2.0}, {"activation_bytes", 1}, {"weight_bytes", 1}}}}};
    try {
        modelFromJson(j);
        FAIL("accepted a negative time");
    } catch (const InputError& e) {
        CHECK(e.field() == "/layers/0/forward_ms");
    }
    json missing = {{"layers", {{{"name", "a"}, {"forward_ms", 1.0}}}}};
    CHECK_THROWS_WITH(modelFromJson(missing), Catch::Contains("/layers/0/backward_ms"));
    CHECK_THROWS_WITH(modelFromJson(json {{"layers", json::array()}}), Catch::Contains("at least one layer"));
    CHECK_THROWS_WITH(
        modelFromJson(json {{"format_version", 99}, {"layers", json::array()}}), Catch::Contains("not supported"));
}

TEST_CASE("cut bytes of a graph count every tensor live across the cut", "[model]")
{
    // 0 -> 1 -> 2 -> 3 and a skip 0 -> 3 (a residual): cuts after 1 and 2 carry layer 0's output too.
    ModelProfile m;
    m.is_graph = true;
    for (int i = 0; i < 4; ++i) {
        Layer l;
        l.activation_bytes = 10.0 * (i + 1);
        if (i > 0)
            l.inputs = {i - 1};
        m.layers.push_back(l);
    }
    m.layers[3].inputs.push_back(0);
    auto cut = m.cutBytes();
    CHECK(cut[0] == 10);
    CHECK(cut[1] == 20 + 10);
    CHECK(cut[2] == 30 + 10);
    CHECK(cut[3] == 0);
}

// #10 item 4: the architecture block took zero heads, negative layers and hidden sizes the heads do not divide.
TEST_CASE("the architecture block is checked like the transformer generator's options", "[model]")
{
    json j = {
        {"layers",
            {{{"name", "a"}, {"forward_ms", 1.0}, {"backward_ms", 2.0}, {"activation_bytes", 1}, {"weight_bytes", 1}}}},
        {"architecture",
            {{"type", "gpt"}, {"layers", 2}, {"hidden", 64}, {"heads", 4}, {"sequence", 16}, {"vocab", 100}}}};
    CHECK_NOTHROW(modelFromJson(j));
    auto expect = [&](const char* key, int value, const std::string& field, const std::string& text) {
        json bad = j;
        bad["architecture"][key] = value;
        try {
            modelFromJson(bad);
            FAIL("accepted " << key << " = " << value);
        } catch (const InputError& e) {
            CHECK(e.field() == field);
            CHECK(e.message().find(text) != std::string::npos);
        }
    };
    expect("heads", 0, "/architecture/heads", "must be > 0, got 0");
    expect("layers", -3, "/architecture/layers", "must be > 0, got -3");
    expect("heads", 5, "/architecture/heads", "must divide hidden (64 is not a multiple of 5)");
    expect("microbatch", 0, "/architecture/microbatch", "must be > 0");
    expect("bytes_per_element", -2, "/architecture/bytes_per_element", "must be > 0");
}
