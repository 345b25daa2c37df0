// SPDX-License-Identifier: MIT
// The QCustomPlot plottable that paints a GanttScene: lane backgrounds, the level-of-detail folded spans (into an
// image on all cores when many are in view, else a fillRect each; always rectangles in SVG/PDF exports), block
// titles and send -> receive arrows. QCustomPlot stays in the .cpp: the view only adds it to its plot.
#pragma once

class QCPAbstractPlottable;
class QCPAxis;

namespace pw::ui {

class GanttScene;

/// Adds to the axes' plot a plottable painting `scene`, which must outlive it. Keys are seconds, values the
/// scene's layout units (the value axis reversed, so that the first block is on top).
QCPAbstractPlottable* addGanttPlottable(QCPAxis* keyAxis, QCPAxis* valueAxis, const GanttScene& scene);

} // namespace pw::ui
