// SPDX-License-Identifier: MIT
#include "data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include "llmc.h"
#include "planner/errors.h"
#include "splitmix.h"

namespace pw::engine {

using planner::InputError;

namespace {

using Rng = SplitMix;

template <class Weights> std::size_t draw(const Weights& items, double u)
{
    double acc = 0;
    for (std::size_t i = 0; i + 1 < items.size(); ++i) {
        acc += items[i];
        if (u < acc)
            return i;
    }
    return items.size() - 1;
}

} // namespace

MarkovSource::MarkovSource(int vocab, std::uint64_t seed, int branching)
    : m_vocab(vocab)
    , m_next(static_cast<std::size_t>(vocab))
{
    // Ids are 32-bit; the cap keeps the chain's set-up (its stationary distribution) to seconds: Llama 3's 128,256
    // and Gemma's 256,000 are in.
    if (vocab < 2 || vocab > (1 << 20))
        throw InputError("synthetic data: vocabulary " + std::to_string(vocab) + " must be in 2..1048576");
    Rng rng {seed};
    for (int s = 0; s < vocab; ++s) {
        auto& edges = m_next[static_cast<std::size_t>(s)];
        double total = 0;
        for (int e = 0; e < branching; ++e) {
            const auto to = static_cast<std::int32_t>(e == 0 ? (s + 1) % vocab : rng.next() % vocab);
            const double w = 0.05 + rng.uniform();
            bool merged = false;
            for (auto& existing : edges)
                if (existing.to == to) {
                    existing.p += w;
                    merged = true;
                }
            if (!merged)
                edges.push_back({to, w});
            total += w;
        }
        for (auto& e : edges)
            e.p /= total;
    }
    // Stationary distribution by power iteration, averaged (Cesaro) so a periodic chain converges too.
    std::vector<double> pi(static_cast<std::size_t>(vocab), 1.0 / vocab), next(pi.size()), avg(pi.size(), 0.0);
    const int iterations = 4000;
    for (int it = 0; it < iterations; ++it) {
        std::fill(next.begin(), next.end(), 0.0);
        for (int s = 0; s < vocab; ++s)
            for (const auto& e : m_next[static_cast<std::size_t>(s)])
                next[e.to] += pi[static_cast<std::size_t>(s)] * e.p;
        pi.swap(next);
        for (std::size_t i = 0; i < pi.size(); ++i)
            avg[i] += pi[i] / iterations;
    }
    m_stationary = avg;
    for (int s = 0; s < vocab; ++s) {
        double h = 0;
        for (const auto& e : m_next[static_cast<std::size_t>(s)])
            h -= e.p * std::log(e.p);
        m_entropy += m_stationary[static_cast<std::size_t>(s)] * h;
    }
}

std::vector<std::int32_t> MarkovSource::generate(std::size_t count, std::uint64_t seed) const
{
    Rng rng {seed ^ 0x5DEECE66Dull};
    std::vector<std::int32_t> out;
    out.reserve(count);
    auto s = static_cast<std::int32_t>(draw(m_stationary, rng.uniform()));
    std::vector<double> p;
    for (std::size_t i = 0; i < count; ++i) {
        out.push_back(s);
        const auto& edges = m_next[s];
        p.clear();
        for (const auto& e : edges)
            p.push_back(e.p);
        s = edges[draw(p, rng.uniform())].to;
    }
    return out;
}

std::string toString(DataSpec::Kind kind)
{
    switch (kind) {
    case DataSpec::Kind::Synthetic:
        return "synthetic";
    case DataSpec::Kind::Tokens:
        return "tokens";
    case DataSpec::Kind::Text:
        return "text";
    }
    return "?";
}

DataSpec::Kind dataKindFromString(const std::string& name)
{
    for (auto k : {DataSpec::Kind::Synthetic, DataSpec::Kind::Tokens, DataSpec::Kind::Text})
        if (toString(k) == name)
            return k;
    throw InputError("data kind '" + name + "': use synthetic, tokens or text");
}

std::vector<std::int32_t> loadTokens(const DataSpec& spec, int vocab, std::size_t microbatch_tokens)
{
    std::vector<std::int32_t> tokens;
    std::error_code ec;
    if (spec.kind != DataSpec::Kind::Synthetic && std::filesystem::is_directory(spec.path, ec))
        throw InputError(spec.path.string() + ": is a directory, not a token or text file");
    switch (spec.kind) {
    case DataSpec::Kind::Synthetic:
        return MarkovSource(vocab, spec.seed).generate(spec.synthetic_tokens, spec.seed);
    case DataSpec::Kind::Tokens:
        tokens = readTokens(spec.path);
        break;
    case DataSpec::Kind::Text: {
        std::ifstream in(spec.path, std::ios::binary);
        if (!in)
            throw InputError(spec.path.string() + ": cannot open the text file");
        const std::string bytes {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        for (unsigned char c : bytes)
            tokens.push_back(c);
        if (vocab < 256)
            throw InputError(spec.path.string() + ": byte-level text needs a vocabulary of 256, the model has "
                + std::to_string(vocab));
        break;
    }
    }
    if (tokens.size() < std::max<std::size_t>(2, microbatch_tokens + 1))
        throw InputError(spec.path.string(), 0, "tokens",
            "holds " + std::to_string(tokens.size()) + " tokens; one microbatch reads "
                + std::to_string(std::max<std::size_t>(1, microbatch_tokens) + 1)
                + " (its sequences' tokens and one more target)");
    for (std::size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] >= vocab)
            throw InputError(spec.path.string(), 0, "tokens",
                "token " + std::to_string(tokens[i]) + " at position " + std::to_string(i)
                    + " is outside the plan's vocabulary of " + std::to_string(vocab) + " (ids 0.."
                    + std::to_string(vocab - 1) + ")");
    return tokens;
}

double syntheticEntropy(const DataSpec& spec, int vocab)
{
    return MarkovSource(vocab, spec.seed).entropyRate();
}

DataOrder::DataOrder(std::vector<std::int32_t> tokens, int microbatches, int batch, int seq)
    : m_tokens(std::move(tokens))
    , m_m(microbatches)
    , m_b(batch)
    , m_t(seq)
{
    if (m_tokens.size() < 2)
        throw InputError("the token stream needs at least 2 tokens");
}

void DataOrder::microbatch(long step, int i, std::span<std::int32_t> inputs, std::span<std::int32_t> targets) const
{
    const std::size_t n = m_tokens.size();
    const std::size_t perStep = tokensPerStep() + 1;
    // Step k's window starts after the k previous windows of m b T + 1 tokens.
    const std::size_t start = (static_cast<std::size_t>(step) % n) * (perStep % n) % n;
    const std::size_t rowLen = static_cast<std::size_t>(m_t);
    for (int r = 0; r < m_b; ++r) {
        const std::size_t row = static_cast<std::size_t>(i) * m_b + r;
        for (std::size_t t = 0; t < rowLen; ++t) {
            const std::size_t pos = start + row * rowLen + t;
            inputs[static_cast<std::size_t>(r) * rowLen + t] = m_tokens[pos % n];
            targets[static_cast<std::size_t>(r) * rowLen + t] = m_tokens[(pos + 1) % n];
        }
    }
}

} // namespace pw::engine
