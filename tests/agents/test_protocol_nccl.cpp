// SPDX-License-Identifier: MIT
// Protocol version 5's transport "nccl" in RunSpec: it goes over the wire and back as itself, by name, and a
// transport the agent does not know is refused naming the field.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agents/protocol/frame.h"
#include "agents/protocol/messages.h"

using namespace pw::agents;
using Catch::Contains;
using nlohmann::json;

TEST_CASE("RunSpec carries the NCCL transport by name", "[protocol]")
{
    RunSpec r;
    r.run_id = "r1";
    r.agent = "a";
    r.plan = json::object();
    r.devices = {0, 1};
    r.cuda_devices = {0, 1};
    r.transport = Transport::Nccl;
    const json j = r.toJson();
    CHECK(j.at("transport") == "nccl");
    CHECK(toString(Transport::Nccl) == "nccl");
    const RunSpec back = std::get<RunSpec>(decode(Frame {MessageType::RunSpec, json::to_cbor(j)}));
    CHECK(back == r);

    json unknown = j;
    unknown["transport"] = "mpi";
    CHECK_THROWS_WITH(
        decode(Frame {MessageType::RunSpec, json::to_cbor(unknown)}), Contains("RunSpec") && Contains("transport"));
}
