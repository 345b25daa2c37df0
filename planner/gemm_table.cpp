// SPDX-License-Identifier: MIT
// GemmTable (gemm_table.h): its grid, its interpolation and its JSON.
#include "gemm_table.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

#include "errors.h"

namespace pw::planner {

namespace {

std::vector<long long> values(const std::vector<GemmSample>& samples, long long GemmSample::*dim)
{
    std::set<long long> out;
    for (const auto& s : samples)
        out.insert(s.*dim);
    return {out.begin(), out.end()};
}

/// The grid's neighbours of x (log2) and x's weight towards the upper one; held at the edges.
std::tuple<long long, long long, double> bracket(const std::vector<long long>& grid, long long x)
{
    if (x <= grid.front())
        return {grid.front(), grid.front(), 0.0};
    if (x >= grid.back())
        return {grid.back(), grid.back(), 0.0};
    const auto hi = std::lower_bound(grid.begin(), grid.end(), x);
    const auto lo = hi - 1;
    if (*hi == x)
        return {*hi, *hi, 0.0};
    const double t = (std::log2(static_cast<double>(x)) - std::log2(static_cast<double>(*lo)))
        / (std::log2(static_cast<double>(*hi)) - std::log2(static_cast<double>(*lo)));
    return {*lo, *hi, t};
}

} // namespace

std::vector<long long> GemmTable::ms() const
{
    return values(samples, &GemmSample::m);
}

std::vector<long long> GemmTable::ns() const
{
    return values(samples, &GemmSample::n);
}

std::vector<long long> GemmTable::ks() const
{
    return values(samples, &GemmSample::k);
}

double GemmTable::seconds(long long m, long long n, long long k) const
{
    if (samples.empty())
        throw std::invalid_argument("the GEMM table has no samples");
    if (m < 1 || n < 1 || k < 1)
        throw std::invalid_argument("a matrix product needs every dimension >= 1");
    std::map<std::tuple<long long, long long, long long>, double> rate; // TFLOP/s by shape
    for (const auto& s : samples)
        rate[{s.m, s.n, s.k}] = s.tflops();
    const auto [m0, m1, tm] = bracket(ms(), m);
    const auto [n0, n1, tn] = bracket(ns(), n);
    const auto [k0, k1, tk] = bracket(ks(), k);
    double tflops = 0;
    for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b)
            for (int c = 0; c < 2; ++c) {
                const double w = (a ? tm : 1 - tm) * (b ? tn : 1 - tn) * (c ? tk : 1 - tk);
                if (w > 0)
                    tflops += w * rate.at({a ? m1 : m0, b ? n1 : n0, c ? k1 : k0});
            }
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / (tflops * 1e12);
}

void GemmTable::validate() const
{
    if (samples.empty())
        throw InputError({}, 0, "/samples", "the table has no samples");
    std::set<std::tuple<long long, long long, long long>> seen;
    for (std::size_t i = 0; i < samples.size(); ++i) {
        const auto& s = samples[i];
        const std::string at = "/samples/" + std::to_string(i);
        if (s.m < 1 || s.n < 1 || s.k < 1)
            throw InputError({}, 0, at, "every dimension (m, n, k) must be at least 1");
        if (!(s.seconds > 0) || !std::isfinite(s.seconds))
            throw InputError({}, 0, at + "/seconds", "must be a positive time");
        if (!seen.insert({s.m, s.n, s.k}).second)
            throw InputError({}, 0, at,
                "the shape " + std::to_string(s.m) + " x " + std::to_string(s.n) + " x " + std::to_string(s.k)
                    + " is measured twice");
    }
    const std::size_t grid = ms().size() * ns().size() * ks().size();
    if (grid != samples.size())
        throw InputError({}, 0, "/samples",
            "the samples are not a full grid: " + std::to_string(samples.size()) + " shapes for "
                + std::to_string(ms().size()) + " m x " + std::to_string(ns().size()) + " n x "
                + std::to_string(ks().size()) + " k values");
}

nlohmann::json toJson(const GemmTable& table)
{
    nlohmann::json samples = nlohmann::json::array();
    for (const auto& s : table.samples)
        samples.push_back({{"m", s.m}, {"n", s.n}, {"k", s.k}, {"seconds", s.seconds}, {"tflops", s.tflops()}});
    return {{"format", "pipewright-gemm-table"}, {"format_version", kGemmTableFormatVersion}, {"device", table.device},
        {"library", table.library}, {"dtype", table.dtype}, {"layout", table.layout}, {"samples", samples}};
}

GemmTable gemmTableFromJson(const nlohmann::json& j)
{
    if (!j.is_object())
        throw InputError({}, 0, "", "a GEMM table is a JSON object");
    if (j.value("format", std::string()) != "pipewright-gemm-table")
        throw InputError({}, 0, "/format", "not a GEMM table (format \"pipewright-gemm-table\")");
    if (j.value("format_version", 0) != kGemmTableFormatVersion)
        throw InputError({}, 0, "/format_version",
            "version " + j.value("format_version", nlohmann::json()).dump() + " is not "
                + std::to_string(kGemmTableFormatVersion));
    GemmTable t;
    t.device = j.value("device", std::string());
    t.library = j.value("library", std::string());
    t.dtype = j.value("dtype", std::string("bf16"));
    t.layout = j.value("layout", std::string());
    if (t.dtype != "bf16" && t.dtype != "fp32" && t.dtype != "fp8")
        throw InputError({}, 0, "/dtype", "must be \"bf16\", \"fp32\" or \"fp8\", not \"" + t.dtype + "\"");
    const auto& samples = j.contains("samples") ? j.at("samples") : nlohmann::json();
    if (!samples.is_array())
        throw InputError({}, 0, "/samples", "must be an array of {m, n, k, seconds}");
    for (std::size_t i = 0; i < samples.size(); ++i) {
        const auto& s = samples[i];
        const std::string at = "/samples/" + std::to_string(i);
        GemmSample g;
        try {
            g.m = s.at("m").get<long long>();
            g.n = s.at("n").get<long long>();
            g.k = s.at("k").get<long long>();
            g.seconds = s.at("seconds").get<double>();
        } catch (const nlohmann::json::exception&) {
            throw InputError({}, 0, at, "needs whole numbers m, n, k and a number seconds");
        }
        t.samples.push_back(g);
    }
    t.validate();
    return t;
}

} // namespace pw::planner
