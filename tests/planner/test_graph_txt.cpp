// SPDX-License-Identifier: MIT
// PipeDream graph.txt import/export: every published profile, error reporting and round trips.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "planner/errors.h"
#include "planner/io/graph_txt.h"

using namespace pw::planner;
namespace fs = std::filesystem;

namespace {

const std::string kProfiles = PW_PROFILES_DIR "/pipedream";

std::vector<std::string> profileNames()
{
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(kProfiles))
        if (fs::exists(entry.path() / "graph.txt"))
            names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::string profilePath(const std::string& name)
{
    return kProfiles + "/" + name + "/graph.txt";
}

/// A scratch directory removed at the end of the test.
struct TempDir
{
    fs::path path;
    TempDir()
    {
        const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
        const auto name = "pw_graph_txt_" + std::to_string(stamp) + "_" + std::to_string(++counter());
        path = fs::temp_directory_path() / name;
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
    std::string write(const std::string& name, const std::string& text) const
    {
        auto file = (path / name).string();
        std::ofstream(file) << text;
        return file;
    }
    static int& counter()
    {
        static int c = 0;
        return c;
    }
};

void requireSameLayers(const ModelProfile& a, const ModelProfile& b)
{
    REQUIRE(a.is_graph == b.is_graph);
    REQUIRE(a.layerCount() == b.layerCount());
    for (int i = 0; i < a.layerCount(); ++i) {
        INFO("layer " << i << " " << a.layers[i].name);
        const auto& x = a.layers[i];
        const auto& y = b.layers[i];
        CHECK(x.name == y.name);
        CHECK(x.kind == y.kind);
        CHECK(x.forward_ms == y.forward_ms);
        CHECK(x.backward_ms == y.backward_ms);
        CHECK(x.activation_bytes == y.activation_bytes);
        CHECK(x.weight_bytes == y.weight_bytes);
        CHECK(x.inputs == y.inputs);
    }
}

/// A node line with the given field texts.
std::string nodeLine(const std::string& id, const std::string& fwd = "1", const std::string& bwd = "2",
    const std::string& act = "4", const std::string& par = "0")
{
    return id + " -- A -- forward_compute_time=" + fwd + ", backward_compute_time=" + bwd + ", activation_size=" + act
        + ", parameter_size=" + par + "\n";
}

const char* kNode1 = "node1 -- Input -- forward_compute_time=0.000, backward_compute_time=0.000, "
                     "activation_size=0.0, parameter_size=0.000\n";
const char* kNode2 = "node2 -- Conv2d(3, 64) -- forward_compute_time=1.500, backward_compute_time=2.250, "
                     "activation_size=1024.0, parameter_size=64.000\n";

} // namespace

TEST_CASE("every PipeDream profile imports as a topologically ordered graph", "[graph_txt]")
{
    const auto names = profileNames();
    REQUIRE(names.size() >= 15);
    for (const auto& name : names) {
        INFO(name);
        auto model = loadGraphTxt(profilePath(name));
        CHECK(model.name == name);
        CHECK(model.is_graph);
        REQUIRE_NOTHROW(model.validate());

        int nodeLines = 0;
        std::ifstream in(profilePath(name));
        for (std::string line; std::getline(in, line);)
            if (!line.empty() && line[0] != '\t')
                ++nodeLines;
        CHECK(model.layerCount() == nodeLines);
        for (int i = 0; i < model.layerCount(); ++i)
            for (int u : model.layers[i].inputs)
                REQUIRE(u < i);
        CHECK(isDataSource(model.layers[0]));
    }
}

TEST_CASE("graph.txt fields map onto layers", "[graph_txt]")
{
    auto vgg = loadGraphTxt(profilePath("vgg16"));
    REQUIRE(vgg.layerCount() == 41);
    // Kahn's order with ties by node number: the file starts with node11, the profile with node1.
    CHECK(vgg.layers[0].name == "node1");
    CHECK(vgg.layers[0].kind == "Input");
    CHECK(vgg.layers[1].name == "node2");
    CHECK(vgg.layers[1].inputs == std::vector<int> {0});
    const auto& conv = vgg.layers[11]; // node12 -- Conv2d(128, 256, ...)
    CHECK(conv.name == "node12");
    CHECK(conv.kind == "Conv2d(128, 256, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
    CHECK(conv.forward_ms == 10.814);
    CHECK(conv.backward_ms == 18.335);
    CHECK(conv.activation_bytes == 411041792.0);
    CHECK(conv.weight_bytes == 1180672.0);

    auto gnmt = loadGraphTxt(profilePath("gnmt"));
    auto it = std::find_if(gnmt.layers.begin(), gnmt.layers.end(), [](const Layer& l) { return l.name == "node7"; });
    REQUIRE(it != gnmt.layers.end());
    CHECK(it->activation_bytes == 6291456.0 + 131072.0 + 131072.0); // "[6291456.0; 131072.0; 131072.0]"
    // GNMT's file repeats "node1 -- node4": the edge counts once.
    auto node4 = std::find_if(gnmt.layers.begin(), gnmt.layers.end(), [](const Layer& l) { return l.name == "node4"; });
    CHECK(node4->inputs.size() == 1);
}

TEST_CASE("ties in the topological order go by node number, then file order", "[graph_txt]")
{
    std::istringstream in(nodeLine("node3") + nodeLine("other") + nodeLine("node10") + nodeLine("node2")
        + "\tnode10 -- node3\n\tnode2 -- node3\n");
    auto model = readGraphTxt(in, "dir/ties/graph.txt");
    CHECK(model.name == "ties");
    std::vector<std::string> order;
    for (const auto& l : model.layers)
        order.push_back(l.name);
    CHECK(order == std::vector<std::string> {"node2", "node10", "node3", "other"});
    CHECK(model.layers[2].inputs == std::vector<int> {1, 0}); // edge order of the file
}

TEST_CASE("bad graph.txt input names the file, the line and the field", "[graph_txt]")
{
    struct Case
    {
        const char* what;
        std::string text;
        int line;
        std::string field;
    };
    const std::string n1 = kNode1;
    const std::string n2 = kNode2;
    const std::vector<Case> cases = {
        {"too few fields", n1 + "node2 -- Conv2d\n", 2, "node line"},
        {"description with separator", "node1 -- A -- B -- C -- D -- E\n", 1, "node line"},
        {"missing field",
            n1 + "node2 -- Conv -- forward_compute_time=1.0, backward_compute_time=1.0, activation_size=4.0\n", 2,
            "parameter_size"},
        {"misspelt field",
            "node1 -- A -- forward_time=1.0, backward_compute_time=1.0, activation_size=4.0, parameter_size=0\n", 1,
            "forward_compute_time"},
        {"negative number", nodeLine("node1", "1.0", "-2.0"), 1, "backward_compute_time"},
        {"NaN", nodeLine("node1", "nan"), 1, "forward_compute_time"},
        {"infinity", nodeLine("node1", "1", "2", "4", "inf"), 1, "parameter_size"},
        {"not a number", n1 + nodeLine("node2", "1", "2", "4 bytes"), 2, "activation_size"},
        {"bad list", nodeLine("node1", "1", "2", "[1.0; x]"), 1, "activation_size"},
        {"unclosed list", nodeLine("node1", "1", "2", "[1.0; 2.0"), 1, "activation_size"},
        {"bad stage id", n1 + n2.substr(0, n2.size() - 1) + " -- stage_id=x\n", 2, "stage_id"},
        {"duplicate node", n1 + n2 + n1, 3, "node_id"},
        {"unknown node in edge", n1 + n2 + "\tnode1 -- node9\n", 3, "edge"},
        {"edge before node", n1 + "\tnode1 -- node2\n" + n2, 2, "edge"},
        {"malformed edge", n1 + n2 + "\tnode1 node2\n", 3, "edge"},
        {"self loop", n1 + n2 + "\tnode2 -- node2\n", 3, "edge"},
        {"cycle", n1 + n2 + nodeLine("node3") + "\tnode1 -- node2\n\tnode2 -- node3\n\tnode3 -- node2\n", 2, "edge"},
    };
    TempDir dir;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const auto& c = cases[i];
        INFO(c.what);
        const std::string name = "bad_" + std::to_string(i) + ".txt";
        const auto path = dir.write(name, c.text);
        try {
            loadGraphTxt(path);
            FAIL("no error for: " << c.what);
        } catch (const InputError& e) {
            const std::string what = e.what();
            INFO(what);
            CHECK(what.find(name) != std::string::npos);
            CHECK(what.find(":" + std::to_string(c.line) + ":") != std::string::npos);
            CHECK(what.find(c.field) != std::string::npos);
            CHECK(e.line() == c.line);
            CHECK(e.field() == c.field);
        }
    }
    CHECK_THROWS_AS(loadGraphTxt(dir.write("empty.txt", "\n\n")), InputError);
    CHECK_THROWS_AS(loadGraphTxt((dir.path / "missing.txt").string()), InputError);
}

TEST_CASE("graph.txt round trip: read, write, read gives the same profile", "[graph_txt]")
{
    for (const auto& name : profileNames()) {
        INFO(name);
        const auto path = profilePath(name);
        auto model = loadGraphTxt(path);
        std::ostringstream out;
        writeGraphTxt(out, model);
        std::istringstream in(out.str());
        auto again = readGraphTxt(in, path);
        CHECK(again.name == model.name);
        requireSameLayers(model, again);
        std::ostringstream out2;
        writeGraphTxt(out2, again);
        CHECK(out2.str() == out.str());
    }
}

TEST_CASE("graph.txt writing keeps values that three decimals would round", "[graph_txt]")
{
    ModelProfile chain;
    chain.name = "chain";
    for (int i = 0; i < 3; ++i) {
        Layer l;
        l.name = i == 1 ? "" : "layer " + std::to_string(i); // an empty name gets a generated id
        l.kind = "Linear\n -- odd";
        l.forward_ms = 0.1234567 * (i + 1);
        l.backward_ms = 2.5;
        l.activation_bytes = 1e9 / 3;
        l.weight_bytes = 4096;
        chain.layers.push_back(l);
    }
    std::ostringstream out;
    writeGraphTxt(out, chain);
    const auto text = out.str();
    CHECK(text.find("backward_compute_time=2.500,") != std::string::npos);
    CHECK(text.find("\tlayer 0 -- node2\n\tnode2 -- layer 2\n") != std::string::npos); // chain edges
    std::istringstream in(text);
    auto back = readGraphTxt(in, "chain.txt");
    REQUIRE(back.layerCount() == 3);
    CHECK(back.layers[0].kind == "Linear - odd");
    for (int i = 0; i < 3; ++i) {
        CHECK(back.layers[i].forward_ms == chain.layers[i].forward_ms);
        CHECK(back.layers[i].activation_bytes == chain.layers[i].activation_bytes);
        CHECK(back.layers[i].inputs == (i == 0 ? std::vector<int> {} : std::vector<int> {i - 1}));
    }
}

TEST_CASE("graph.txt writing with a plan adds stage ids", "[graph_txt]")
{
    auto model = loadGraphTxt(profilePath("alexnet"));
    Plan plan;
    plan.model = model;
    const int n = model.layerCount();
    plan.stages = {{0, 9, {0}}, {10, n - 1, {1}}};
    std::ostringstream out;
    writeGraphTxt(out, model, &plan);
    std::istringstream lines(out.str());
    int nodeLine = 0;
    for (std::string line; std::getline(lines, line);) {
        if (line[0] == '\t')
            continue;
        const std::string expected = " -- stage_id=" + std::to_string(nodeLine < 10 ? 0 : 1);
        INFO(line);
        CHECK(line.size() > expected.size());
        CHECK(line.compare(line.size() - expected.size(), expected.size(), expected) == 0);
        ++nodeLine;
    }
    CHECK(nodeLine == n);
    std::istringstream in(out.str());
    requireSameLayers(model, readGraphTxt(in, "alexnet/gpus=2.txt"));

    Plan wrong;
    wrong.model.layers.resize(3);
    std::ostringstream sink;
    CHECK_THROWS_AS(writeGraphTxt(sink, model, &wrong), InputError);
}

// #10 item 15: the CLI went by the ".txt" suffix alone, the app also by content; one rule now serves both.
TEST_CASE("one rule tells a graph.txt from a JSON model: the suffix, else the first character", "[graph_txt]")
{
    TempDir dir;
    const std::string graph = "node1 -- Input0 -- forward_compute_time=0.0, backward_compute_time=0.0, "
                              "activation_size=4.0, parameter_size=0.0\n";
    const std::string model = R"({"layers": [{"name": "a", "forward_ms": 1, "backward_ms": 2, )"
                              R"("activation_bytes": 1, "weight_bytes": 1}]})";
    CHECK(isGraphTxtFile(dir.write("graph.txt", graph)));
    CHECK(isGraphTxtFile(dir.write("GRAPH.TXT", graph)));
    CHECK_FALSE(isGraphTxtFile(dir.write("model.json", model)));
    CHECK_FALSE(isGraphTxtFile(dir.write("model.JSON", "  \n" + graph))); // the suffix wins
    CHECK(isGraphTxtFile(dir.write("profile.graph", graph))); // no known suffix: the content decides
    CHECK(isGraphTxtFile(dir.write("profile", "\n\n" + graph)));
    CHECK_FALSE(isGraphTxtFile(dir.write("profile.model", "\n  " + model)));
    CHECK_FALSE(isGraphTxtFile(dir.write("bom.model", "\xEF\xBB\xBF" + model)));
    CHECK_FALSE(isGraphTxtFile((dir.path / "missing").string()));
    CHECK(loadAnyModel(dir.write("p.graph", graph)).is_graph);
    CHECK_FALSE(loadAnyModel(dir.write("p.model", model)).is_graph);
    CHECK_THROWS_WITH(loadGraphTxt(dir.path.string()), Catch::Contains("is a directory"));
}
