// SPDX-License-Identifier: MIT
// Training data and the order every run reads it in, whatever the plan: step k takes the next m*b*T + 1 tokens
// of the stream (m microbatches of b sequences of T tokens), cut into rows of T; microbatch i is rows i*b ...
// (i+1)*b - 1; targets are the inputs shifted by one. So the same tokens and checkpoint give the same losses on
// any plan.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace pw::engine {

/// @brief A seeded first-order Markov chain over a vocabulary, whose entropy rate is known: the lowest mean
/// cross-entropy any model can reach on text it generates (a next-token predictor that sees the current token).
class MarkovSource
{
public:
    /// Each token has `branching` successors (always including token + 1 mod vocab, so the chain is irreducible)
    /// with random probabilities.
    MarkovSource(int vocab, std::uint64_t seed, int branching = 4);

    int vocab() const { return m_vocab; }
    /// Entropy rate in nats per token: sum over tokens of stationary probability x entropy of its successors.
    double entropyRate() const { return m_entropy; }
    /// `count` tokens, starting from a draw of the stationary distribution.
    std::vector<std::int32_t> generate(std::size_t count, std::uint64_t seed) const;

private:
    struct Edge
    {
        std::int32_t to;
        double p;
    };
    int m_vocab;
    std::vector<std::vector<Edge>> m_next;
    std::vector<double> m_stationary;
    double m_entropy = 0;
};

/// @brief Where a run's tokens come from.
struct DataSpec
{
    enum class Kind : std::uint8_t { Synthetic, Tokens, Text };
    Kind kind = Kind::Synthetic;
    std::filesystem::path path; ///< Tokens: an llm.c token file (16- or 32-bit ids); Text: bytes are tokens (vocab 256)
    std::uint64_t seed = 1234; ///< Synthetic: the chain's and the stream's seed
    std::size_t synthetic_tokens = 1 << 20; ///< Synthetic: length of the generated stream

    bool operator==(const DataSpec&) const = default;
};
std::string toString(DataSpec::Kind kind);
/// "synthetic" | "tokens" | "text"; throws InputError otherwise.
DataSpec::Kind dataKindFromString(const std::string& name);

/// Loads (or generates) the stream; throws InputError naming the file: a directory, a token >= vocab with its
/// position, or fewer tokens than one microbatch reads (`microbatch_tokens` = b x T inputs, and one more target).
std::vector<std::int32_t> loadTokens(const DataSpec& spec, int vocab, std::size_t microbatch_tokens = 1);
/// The synthetic corpus' floor for a vocabulary (the chain loadTokens draws from).
double syntheticEntropy(const DataSpec& spec, int vocab);

/// @brief The data contract over a token stream.
class DataOrder
{
public:
    DataOrder(std::vector<std::int32_t> tokens, int microbatches, int batch, int seq);

    int microbatches() const { return m_m; }
    /// Inputs and targets (b x T each, row-major) of microbatch i of step k; positions wrap to the stream's
    /// start at its end.
    void microbatch(long step, int i, std::span<std::int32_t> inputs, std::span<std::int32_t> targets) const;
    std::size_t tokensPerStep() const { return static_cast<std::size_t>(m_m) * m_b * m_t; }

private:
    std::vector<std::int32_t> m_tokens;
    int m_m, m_b, m_t;
};

} // namespace pw::engine
