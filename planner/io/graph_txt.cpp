// SPDX-License-Identifier: MIT
// Reader and writer of PipeDream's graph.txt profiles (grammar: docs/papers/pipedream-reference-optimizer.md §1.1).
#include "graph_txt.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <queue>
#include <set>
#include <string_view>
#include <unordered_map>

#include "../errors.h"
#include "json_file.h"

namespace pw::planner {
namespace {

constexpr std::string_view kSeparator = " -- ";

std::string_view trim(std::string_view s)
{
    const auto isSpace
        = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; };
    while (!s.empty() && isSpace(s.front()))
        s.remove_prefix(1);
    while (!s.empty() && isSpace(s.back()))
        s.remove_suffix(1);
    return s;
}

std::vector<std::string_view> split(std::string_view s, std::string_view separator)
{
    std::vector<std::string_view> parts;
    std::size_t start = 0;
    for (;;) {
        auto pos = s.find(separator, start);
        if (pos == std::string_view::npos) {
            parts.push_back(s.substr(start));
            return parts;
        }
        parts.push_back(s.substr(start, pos - start));
        start = pos + separator.size();
    }
}

/// The model name a file suggests: its directory for ".../<model>/graph.txt", else the file's stem.
std::string nameFromSource(const std::string& source)
{
    std::filesystem::path p(source);
    auto dir = p.parent_path().filename().string();
    if (!dir.empty() && dir != "." && dir != "..")
        return dir;
    return p.stem().string();
}

/// k of an id "node<k>", or INT_MAX for other ids (e.g. "compressed_node5"), which then sort after.
int nodeNumber(std::string_view id)
{
    constexpr std::string_view prefix = "node";
    if (id.size() <= prefix.size() || id.substr(0, prefix.size()) != prefix)
        return INT_MAX;
    int k = 0;
    auto digits = id.substr(prefix.size());
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
    if (ec != std::errc() || ptr != digits.data() + digits.size())
        return INT_MAX;
    return k;
}

/// One parsed node line, before the layers are put in topological order.
struct RawNode
{
    Layer layer;
    int line = 0;
    int number = INT_MAX;
    std::vector<int> inputs; ///< file indices of producers, in edge order, without duplicates
};

class GraphTxtParser
{
public:
    explicit GraphTxtParser(std::string source)
        : m_source(std::move(source))
    {
    }

    ModelProfile parse(std::istream& in)
    {
        std::string text;
        int lineNo = 0;
        while (std::getline(in, text)) {
            ++lineNo;
            std::string_view line(text);
            if (trim(line).empty())
                continue;
            if (line.front() == '\t')
                parseEdge(trim(line), lineNo);
            else
                parseNode(trim(line), lineNo);
        }
        if (in.bad())
            throw InputError(m_source, lineNo, "", "read error");
        if (m_nodes.empty())
            throw InputError(m_source, 0, "", "no node lines found (not a PipeDream graph.txt?)");
        return build();
    }

private:
    [[noreturn]] void fail(int line, const std::string& field, const std::string& message) const
    {
        throw InputError(m_source, line, field, message);
    }

    double parseNumber(std::string_view text, int line, const std::string& field) const
    {
        auto t = trim(text);
        if (!t.empty() && t.front() == '+')
            t.remove_prefix(1);
        double v = 0;
        auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || ec != std::errc() || ptr != t.data() + t.size())
            fail(line, field, "'" + std::string(trim(text)) + "' is not a number");
        if (!std::isfinite(v))
            fail(line, field, "must be finite, got '" + std::string(t) + "'");
        if (v < 0)
            fail(line, field, "must be >= 0, got '" + std::string(t) + "'");
        return v;
    }

    /// "name=value" with the expected name; returns the value text.
    std::string_view keyValue(std::string_view item, std::string_view name, int line) const
    {
        auto eq = item.find('=');
        std::string field(name);
        if (eq == std::string_view::npos)
            fail(line, field, "expected '" + field + "=<value>', found '" + std::string(item) + "'");
        if (trim(item.substr(0, eq)) != name)
            fail(line, field, "expected '" + field + "=', found '" + std::string(item.substr(0, eq + 1)) + "'");
        return item.substr(eq + 1);
    }

    void parseNode(std::string_view line, int lineNo)
    {
        auto tokens = split(line, kSeparator);
        if (tokens.size() < 3)
            fail(lineNo, "node line",
                "expected '<node_id> -- <node_desc> -- <metadata>', found " + std::to_string(tokens.size())
                    + " ' -- '-separated field(s)");
        if (tokens.size() > 4)
            fail(lineNo, "node line",
                "too many ' -- '-separated fields (" + std::to_string(tokens.size())
                    + "); a node description must not contain ' -- '");
        RawNode node;
        node.line = lineNo;
        node.layer.name = std::string(trim(tokens[0]));
        node.layer.kind = std::string(tokens[1]);
        if (node.layer.name.empty())
            fail(lineNo, "node_id", "empty node id");
        if (m_index.count(node.layer.name))
            fail(lineNo, "node_id",
                "node '" + node.layer.name + "' is defined twice (first on line "
                    + std::to_string(m_nodes[m_index.at(node.layer.name)].line) + ")");
        node.number = nodeNumber(node.layer.name);

        auto fields = split(tokens[2], ", ");
        static const char* const names[]
            = {"forward_compute_time", "backward_compute_time", "activation_size", "parameter_size"};
        if (fields.size() != 4) {
            std::string missing;
            for (const char* n : names)
                if (tokens[2].find(n) == std::string_view::npos)
                    missing = n;
            fail(lineNo, missing.empty() ? "metadata" : missing,
                missing.empty() ? "expected 4 ', '-separated fields, found " + std::to_string(fields.size())
                                : "missing field");
        }
        node.layer.forward_ms = parseNumber(keyValue(fields[0], names[0], lineNo), lineNo, names[0]);
        node.layer.backward_ms = parseNumber(keyValue(fields[1], names[1], lineNo), lineNo, names[1]);
        node.layer.activation_bytes = parseActivation(keyValue(fields[2], names[2], lineNo), lineNo);
        node.layer.weight_bytes = parseNumber(keyValue(fields[3], names[3], lineNo), lineNo, names[3]);
        if (tokens.size() == 4) {
            auto value = trim(keyValue(tokens[3], "stage_id", lineNo));
            int stage = 0;
            auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), stage);
            if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || stage < 0)
                fail(lineNo, "stage_id", "'" + std::string(value) + "' is not a stage number");
        }
        m_index.emplace(node.layer.name, static_cast<int>(m_nodes.size()));
        m_nodes.push_back(std::move(node));
    }

    /// A number, or "[a; b; c]" whose entries are summed left to right (as PipeDream's parser does).
    double parseActivation(std::string_view text, int line) const
    {
        const std::string field = "activation_size";
        auto t = trim(text);
        if (t.empty() || t.front() != '[')
            return parseNumber(t, line, field);
        if (t.back() != ']')
            fail(line, field, "list '" + std::string(t) + "' lacks its closing ']'");
        double sum = 0;
        for (auto item : split(t.substr(1, t.size() - 2), ";"))
            sum += parseNumber(item, line, field);
        return sum;
    }

    int lookup(std::string_view id, int lineNo) const
    {
        auto it = m_index.find(std::string(id));
        if (it == m_index.end())
            fail(lineNo, "edge",
                "unknown node '" + std::string(id) + "' (nodes must be defined before the edges that use them)");
        return it->second;
    }

    void parseEdge(std::string_view line, int lineNo)
    {
        auto tokens = split(line, kSeparator);
        if (tokens.size() != 2)
            fail(lineNo, "edge", "expected '<src_node_id> -- <dst_node_id>', found '" + std::string(line) + "'");
        int src = lookup(trim(tokens[0]), lineNo);
        int dst = lookup(trim(tokens[1]), lineNo);
        if (src == dst)
            fail(lineNo, "edge", "node '" + m_nodes[src].layer.name + "' feeds itself (the graph must be acyclic)");
        auto& inputs = m_nodes[dst].inputs;
        if (std::find(inputs.begin(), inputs.end(), src) == inputs.end())
            inputs.push_back(src);
    }

    /// Kahn's algorithm, ready nodes taken by (k of node<k>, file order).
    ModelProfile build()
    {
        const int n = static_cast<int>(m_nodes.size());
        std::vector<std::vector<int>> consumers(n);
        std::vector<int> pending(n, 0);
        for (int v = 0; v < n; ++v) {
            pending[v] = static_cast<int>(m_nodes[v].inputs.size());
            for (int u : m_nodes[v].inputs)
                consumers[u].push_back(v);
        }
        using Key = std::pair<int, int>; // (node number, file index)
        std::priority_queue<Key, std::vector<Key>, std::greater<>> ready;
        for (int v = 0; v < n; ++v)
            if (pending[v] == 0)
                ready.push({m_nodes[v].number, v});
        std::vector<int> position(n, -1);
        std::vector<int> order;
        order.reserve(n);
        while (!ready.empty()) {
            int v = ready.top().second;
            ready.pop();
            position[v] = static_cast<int>(order.size());
            order.push_back(v);
            for (int w : consumers[v])
                if (--pending[w] == 0)
                    ready.push({m_nodes[w].number, w});
        }
        if (static_cast<int>(order.size()) != n) {
            int culprit = 0;
            while (position[culprit] >= 0)
                ++culprit;
            fail(m_nodes[culprit].line, "edge",
                "the graph has a cycle through node '" + m_nodes[culprit].layer.name + "'");
        }
        ModelProfile model;
        model.name = nameFromSource(m_source);
        model.is_graph = true;
        model.layers.reserve(n);
        for (int v : order) {
            Layer layer = std::move(m_nodes[v].layer);
            for (int u : m_nodes[v].inputs)
                layer.inputs.push_back(position[u]);
            model.layers.push_back(std::move(layer));
        }
        return model;
    }

    std::string m_source;
    std::vector<RawNode> m_nodes;
    std::unordered_map<std::string, int> m_index;
};

/// "%.3f" as PipeDream writes it, or the shortest exact form when three decimals would lose the value.
std::string formatNumber(double v)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    double back = 0;
    std::from_chars(buf, buf + std::strlen(buf), back);
    if (back == v)
        return buf;
    auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, ptr);
}

/// Text that survives the " -- " split: no newlines, no separator inside.
std::string sanitizeDescription(std::string s)
{
    std::erase(s, '\n');
    std::erase(s, '\r');
    for (auto pos = s.find(kSeparator); pos != std::string::npos; pos = s.find(kSeparator))
        s.replace(pos, kSeparator.size(), " - ");
    return s;
}

/// Node ids as written: the layer names where they are usable and unique, else generated ones.
std::vector<std::string> nodeIds(const ModelProfile& model)
{
    std::set<std::string> used;
    std::vector<std::string> ids;
    for (int i = 0; i < model.layerCount(); ++i) {
        std::string id(trim(model.layers[i].name));
        bool usable = !id.empty() && id == model.layers[i].name && id.find(kSeparator) == std::string::npos
            && id.find_first_of("\n\r\t") == std::string::npos && !used.count(id);
        if (!usable) {
            id = "node" + std::to_string(i + 1);
            for (int suffix = 2; used.count(id); ++suffix)
                id = "node" + std::to_string(i + 1) + "_" + std::to_string(suffix);
        }
        used.insert(id);
        ids.push_back(std::move(id));
    }
    return ids;
}

} // namespace

ModelProfile readGraphTxt(std::istream& in, const std::string& source)
{
    return GraphTxtParser(source).parse(in);
}

ModelProfile loadGraphTxt(const std::string& path)
{
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw InputError(path, 0, "", "is a directory, not a file");
    std::ifstream in(path);
    if (!in)
        throw InputError(path, 0, "", "cannot open file");
    return readGraphTxt(in, path);
}

bool isGraphTxtFile(const std::string& path)
{
    std::string suffix = std::filesystem::path(path).extension().string();
    std::transform(suffix.begin(), suffix.end(), suffix.begin(),
        [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (suffix == ".txt")
        return true;
    if (suffix == ".json")
        return false;
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        return false;
    std::ifstream in(path, std::ios::binary);
    char c = 0;
    while (in.get(c))
        if (!std::isspace(static_cast<unsigned char>(c)))
            return c != '{' && c != '\xEF'; // '\xEF': a UTF-8 byte-order mark before JSON
    return false;
}

ModelProfile loadAnyModel(const std::string& path)
{
    return isGraphTxtFile(path) ? loadGraphTxt(path) : loadModel(path);
}

void writeGraphTxt(std::ostream& out, const ModelProfile& model, const Plan* plan)
{
    const int n = model.layerCount();
    std::vector<int> stage(n, -1);
    if (plan) {
        if (plan->model.layerCount() != n)
            throw InputError("", 0, "plan",
                "the plan has " + std::to_string(plan->model.layerCount()) + " layers, the model " + std::to_string(n));
        if (plan->pipelineCount() > 1)
            throw InputError("", 0, "plan",
                "graph.txt gives each layer one stage_id, but the plan has " + std::to_string(plan->pipelineCount())
                    + " pipelines (HetPipe virtual workers) that each place every layer");
        for (int s = 0; s < plan->stageCount(); ++s)
            for (int pos = plan->stages[s].first_layer; pos <= plan->stages[s].last_layer; ++pos)
                if (pos >= 0 && pos < n)
                    stage[plan->layerAt(pos)] = s;
    }
    const auto ids = nodeIds(model);
    for (int i = 0; i < n; ++i) {
        const auto& l = model.layers[i];
        out << ids[i] << kSeparator << sanitizeDescription(l.kind.empty() ? l.name : l.kind) << kSeparator
            << "forward_compute_time=" << formatNumber(l.forward_ms)
            << ", backward_compute_time=" << formatNumber(l.backward_ms)
            << ", activation_size=" << formatNumber(l.activation_bytes)
            << ", parameter_size=" << formatNumber(l.weight_bytes);
        if (stage[i] >= 0)
            out << kSeparator << "stage_id=" << stage[i];
        out << '\n';
    }
    for (int i = 0; i < n; ++i) {
        if (model.is_graph) {
            for (int u : model.layers[i].inputs)
                if (u >= 0 && u < n)
                    out << '\t' << ids[u] << kSeparator << ids[i] << '\n';
        } else if (i > 0) {
            out << '\t' << ids[i - 1] << kSeparator << ids[i] << '\n';
        }
    }
}

} // namespace pw::planner
