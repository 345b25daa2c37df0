// SPDX-License-Identifier: MIT
// Tests of JSON file I/O: syntax-error lines, JSON pointer to line, and load errors naming file, line, field.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "planner/errors.h"
#include "planner/io/json_file.h"

using namespace pw::planner;
namespace fs = std::filesystem;

namespace {

/// A scratch folder removed at the end of the test.
class JsonFileTempDir
{
public:
    JsonFileTempDir()
    {
        std::random_device rd;
        m_path = fs::temp_directory_path() / ("pw_json_file_" + std::to_string(rd()) + std::to_string(rd()));
        fs::create_directories(m_path);
    }
    ~JsonFileTempDir()
    {
        std::error_code ec;
        fs::remove_all(m_path, ec);
    }
    std::string write(const std::string& name, const std::string& text) const
    {
        auto p = (m_path / name).string();
        std::ofstream(p, std::ios::binary) << text;
        return p;
    }
    std::string path(const std::string& name) const { return (m_path / name).string(); }

private:
    fs::path m_path;
};

template <typename F> InputError errorOf(F&& f)
{
    try {
        f();
    } catch (const InputError& e) {
        return e;
    }
    FAIL("expected an InputError");
    return InputError("unreachable");
}

// Line numbers are part of the test: keep the layout.
const char* kModel = R"({
  "name": "tiny",
  "microbatch_size": 1,
  "layers": [
    {"name": "a", "forward_ms": 1, "backward_ms": 2, "activation_bytes": 10, "weight_bytes": 5},
    {
      "name": "b",
      "forward_ms": -3,
      "backward_ms": 2,
      "activation_bytes": 10,
      "weight_bytes": 5
    }
  ]
}
)";

} // namespace

TEST_CASE("readJsonFile reports the line of a syntax error", "[json_file]")
{
    JsonFileTempDir dir;
    auto p = dir.write("bad.json", "{\n  \"a\": 1,\n  \"b\": [1, 2,, 3]\n}\n");
    auto e = errorOf([&] { readJsonFile(p); });
    CHECK(e.source() == p);
    CHECK(e.line() == 3);
    CHECK(e.field().empty());
    CHECK(std::string(e.what()).rfind(p + ":3: ", 0) == 0);
    CHECK(e.message().find("json.exception") == std::string::npos);
    CHECK(e.message().find("column 14") != std::string::npos);

    // Unexpected end of input points at the last line with content, not past the final newline.
    auto truncated = dir.write("truncated.json", "{\n  \"a\": [1,\n   2\n\n");
    CHECK(errorOf([&] { readJsonFile(truncated); }).line() == 3);

    auto first = dir.write("first.json", "nope");
    CHECK(errorOf([&] { readJsonFile(first); }).line() == 1);
}

TEST_CASE("readJsonFile reports a missing file and reads a good one", "[json_file]")
{
    JsonFileTempDir dir;
    auto missing = dir.path("absent.json");
    auto e = errorOf([&] { readJsonFile(missing); });
    CHECK(e.source() == missing);
    CHECK(e.line() == 0);
    CHECK(e.message().rfind("cannot open: ", 0) == 0);
    CHECK(e.message().find("No such file") != std::string::npos);

    auto good = dir.write("good.json", "{\"x\": [1, 2, {\"y\": \"z\"}]}");
    CHECK(readJsonFile(good)["x"][2]["y"] == "z");
}

TEST_CASE("writeJsonFile round-trips and reports unwritable paths", "[json_file]")
{
    JsonFileTempDir dir;
    nlohmann::json j = {{"name", "m"}, {"values", {1, 2.5, "three"}}, {"nested", {{"k", nullptr}}}};
    auto p = dir.path("out.json");
    writeJsonFile(p, j);
    CHECK(readJsonFile(p) == j);

    auto e = errorOf([&] { writeJsonFile(dir.path("no/such/folder/out.json"), j); });
    CHECK(e.message().rfind("cannot write: ", 0) == 0);

    nlohmann::json badUtf8 = std::string("\xff\xfe");
    CHECK(errorOf([&] { writeJsonFile(dir.path("bad.json"), badUtf8); }).message().rfind("cannot serialize", 0) == 0);
}

TEST_CASE("lineOfJsonPointer finds values in objects and arrays", "[json_file]")
{
    const std::string text = R"({
  "name": "m",
  "layers": [
    {"forward_ms": 1},
    {
      "forward_ms":
        2.5
    },
    [10,
     [20, 21],
     {"deep": true}]
  ],
  "a/b": {"m~n": 7},
  "tricky": "} ] { [ \" , still one string",
  "after": null
})";
    CHECK(lineOfJsonPointer(text, "") == 1);
    CHECK(lineOfJsonPointer(text, "/name") == 2);
    CHECK(lineOfJsonPointer(text, "/layers") == 3);
    CHECK(lineOfJsonPointer(text, "/layers/0") == 4);
    CHECK(lineOfJsonPointer(text, "/layers/0/forward_ms") == 4);
    CHECK(lineOfJsonPointer(text, "/layers/1") == 5);
    CHECK(lineOfJsonPointer(text, "/layers/1/forward_ms") == 7); // where the value starts, not the key
    CHECK(lineOfJsonPointer(text, "/layers/2/0") == 9);
    CHECK(lineOfJsonPointer(text, "/layers/2/1/1") == 10);
    CHECK(lineOfJsonPointer(text, "/layers/2/2/deep") == 11);
    CHECK(lineOfJsonPointer(text, "/a~1b/m~0n") == 13);
    CHECK(lineOfJsonPointer(text, "/after") == 15);

    SECTION("absent or malformed pointers give 0")
    {
        CHECK(lineOfJsonPointer(text, "/missing") == 0);
        CHECK(lineOfJsonPointer(text, "/layers/3") == 0);
        CHECK(lineOfJsonPointer(text, "/layers/01") == 0);
        CHECK(lineOfJsonPointer(text, "/layers/-") == 0);
        CHECK(lineOfJsonPointer(text, "/name/0") == 0);
        CHECK(lineOfJsonPointer(text, "/layers/0/forward_ms/x") == 0);
        CHECK(lineOfJsonPointer(text, "name") == 0);
        CHECK(lineOfJsonPointer(text, "/tricky/0") == 0);
        CHECK(lineOfJsonPointer("", "/a") == 0);
        CHECK(lineOfJsonPointer("[]", "/0") == 0);
        CHECK(lineOfJsonPointer("{}", "/a") == 0);
    }
}

TEST_CASE("lineOfJsonPointer decodes keys and follows nlohmann on duplicates", "[json_file]")
{
    // "\u0041" is "A"; "\u00e9" is "é" in UTF-8; "\ud83d\ude00" is a surrogate pair (U+1F600).
    const std::string text = "{\"\\u0041\": 1,\n\"caf\\u00e9\": 2,\n\"\\ud83d\\ude00\": 3,\n\"q\\\"uote\": 4,\n"
                             "\"dup\": 5,\n\"dup\": 6\n}";
    CHECK(lineOfJsonPointer(text, "/A") == 1);
    CHECK(lineOfJsonPointer(text, "/caf\xc3\xa9") == 2);
    CHECK(lineOfJsonPointer(text, "/\xf0\x9f\x98\x80") == 3);
    CHECK(lineOfJsonPointer(text, "/q\"uote") == 4);
    CHECK(nlohmann::json::parse(text)["dup"] == 6);
    CHECK(lineOfJsonPointer(text, "/dup") == 6); // nlohmann keeps the last duplicate

    CHECK(lineOfJsonPointer("\xEF\xBB\xBF{\r\n\"a\":\r\n[0, 1]}", "/a/1") == 3); // BOM and CRLF
    CHECK(lineOfJsonPointer("{\"a\":{\"b\":[{},{\"c\":\"x\"}]}}", "/a/b/1/c") == 1);
}

TEST_CASE("loadModel names the file, line and field of a bad value", "[json_file]")
{
    JsonFileTempDir dir;
    auto p = dir.write("model.json", kModel);
    auto e = errorOf([&] { loadModel(p); });
    CHECK(e.source() == p);
    CHECK(e.field() == "/layers/1/forward_ms");
    CHECK(e.line() == 8);
    CHECK(std::string(e.what()).rfind(p + ":8: /layers/1/forward_ms: ", 0) == 0);

    SECTION("a wrongly typed value")
    {
        std::string text = kModel;
        text.replace(text.find("\"weight_bytes\": 5}"), 17, "\"weight_bytes\": \"big\"");
        auto typed = dir.write("typed.json", text);
        auto te = errorOf([&] { loadModel(typed); });
        CHECK(te.field() == "/layers/0/weight_bytes");
        CHECK(te.line() == 5);
    }
    SECTION("a missing field is reported on the object that lacks it")
    {
        std::string text = kModel;
        text.replace(text.find("-3"), 2, " 3");
        text.replace(text.find("\"backward_ms\": 2,\n      \"activation"), 18, "");
        auto missing = dir.write("missing.json", text);
        auto me = errorOf([&] { loadModel(missing); });
        CHECK(me.field() == "/layers/1/backward_ms");
        CHECK(me.line() == 6);
    }
    SECTION("syntax errors and good files")
    {
        auto broken = dir.write("broken.json", "{\n \"layers\": [\n }\n");
        CHECK(errorOf([&] { loadModel(broken); }).line() == 3);
        std::string text = kModel;
        text.replace(text.find("-3"), 2, "3");
        auto good = dir.write("good.json", text);
        auto m = loadModel(good);
        CHECK(m.layerCount() == 2);
        CHECK(m.layers[1].forward_ms == 3);
    }
}

TEST_CASE("loadCluster and loadPlan locate errors too", "[json_file]")
{
    JsonFileTempDir dir;
    auto cluster = dir.write("cluster.json",
        "{\n  \"device_types\": [\n    {\"name\": \"A100\"}\n  ],\n"
        "  \"nodes\": []\n}\n");
    auto ce = errorOf([&] { loadCluster(cluster); });
    CHECK(ce.source() == cluster);
    CHECK(ce.field() == "/device_types/0/memory_bytes");
    CHECK(ce.line() == 3);

    auto plan = dir.write("plan.json", "{\n  \"model\": {\n    \"layers\": 5\n  }\n}\n");
    auto pe = errorOf([&] { loadPlan(plan); });
    CHECK(pe.source() == plan);
    CHECK(pe.field() == "/model/layers");
    CHECK(pe.line() == 3);

    CHECK(errorOf([&] { loadPlan(dir.path("nothing.json")); }).message().rfind("cannot open", 0) == 0);
}

// #10 item 4: nlohmann keeps the last of two equal keys without a word, so a typo'd copy silently won.
TEST_CASE("a key given twice in one object is an error naming the file, line and key", "[json_file]")
{
    JsonFileTempDir dir;
    const auto path = dir.write("dup.json",
        "{\n  \"name\": \"c\",\n  \"nodes\": [\n    {\"name\": \"n0\", \"count\": 4},\n"
        "    {\"name\": \"n1\",\n     \"count\": 4,\n     \"count\": 8}\n  ]\n}\n");
    try {
        readJsonFile(path);
        FAIL("accepted a duplicate key");
    } catch (const InputError& e) {
        CHECK(e.source() == path);
        CHECK(e.line() == 7);
        CHECK(e.field() == "/nodes/1/count");
        CHECK(e.message().find("duplicate key 'count'") != std::string::npos);
    }
    // The same key in different objects, and keys that need escaping in a pointer, are fine or located.
    CHECK_NOTHROW(readJsonFile(dir.write("ok.json", R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})")));
    CHECK_THROWS_WITH(readJsonFile(dir.write("slash.json", "{\"a/b\": {\"k\": 1,\n\"k\": 2}}")),
        Catch::Contains(":2: /a~1b/k: duplicate key 'k'"));
    // Many keys in one object: still found.
    std::string many = "{";
    for (int i = 0; i < 100; ++i)
        many += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ",\n";
    many += "\"k42\": 0}";
    CHECK_THROWS_WITH(readJsonFile(dir.write("many.json", many)), Catch::Contains(":101: /k42: duplicate key"));
}

TEST_CASE("a directory given as a file says so instead of a JSON syntax error", "[json_file]")
{
    JsonFileTempDir dir;
    const auto folder = dir.path("folder.json");
    fs::create_directories(folder);
    CHECK_THROWS_WITH(readJsonFile(folder), Catch::Contains("is a directory, not a file"));
    CHECK_THROWS_WITH(loadModel(folder), Catch::Contains(folder + ": is a directory"));
    CHECK_THROWS_WITH(loadCluster(folder), Catch::Contains("is a directory"));
    CHECK_THROWS_WITH(loadPlan(folder), Catch::Contains("is a directory"));
}
