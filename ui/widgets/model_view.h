// SPDX-License-Identifier: MIT
// The model view: a bar per layer (forward and backward time stacked, on the device type of the layer's stage),
// weight and stashed activation memory per layer as a second series, the stages as coloured bands, and the stage
// boundaries as handles to drag. A drag previews the re-simulated plan live and lands as one undo step.
#pragma once

#include <QPoint>
#include <QVector>
#include <QWidget>
#include <vector>

class QCustomPlot;
class QLabel;

namespace pw::ui {

class PlanDocument;

class ModelView : public QWidget
{
    Q_OBJECT

public:
    explicit ModelView(PlanDocument& document, QWidget* parent = nullptr);

    QCustomPlot* plot() const { return m_plot; }
    /// The plot's pixel position of boundary `boundary`'s handle (its line's middle), for tests.
    QPoint handlePoint(int boundary) const;
    /// The boundary whose handle is within a few pixels of `pos`, or -1.
    int boundaryAt(QPoint pos) const;
    /// The boundary being dragged, or -1.
    int draggedBoundary() const { return m_drag; }
    /// How many stage labels fit and are drawn now (the others' stages are named on hover).
    int labelsShown() const { return m_labelsShown; }
    /// Whether the handles are drawn thin because they are closer than a grip is wide.
    bool denseHandles() const { return m_denseHandles; }
    /// The hover text of the layer at `layerPosition` (name, kind, stage, times, bytes); empty outside the model.
    QString layerToolTip(double layerPosition) const;

    /// Stage edits the context menu offers at a layer position (also for tests). Errors go to message().
    void splitStageAt(double layerPosition);
    void mergeStageAt(double layerPosition);
    void assignDevicesAt(double layerPosition);
    /// Runs stage `s` on `devices`; those in `taken` belong to other stages and are swapped for devices stage `s`
    /// gives up (one undo step). Errors go to message().
    void assignDevicesTo(int s, const std::vector<int>& devices, const std::vector<int>& taken = {});

signals:
    /// A note for the status bar: why an edit could not be made.
    void message(const QString& text);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    void rebuild();
    /// rebuild() once the current event is handled (coalesces zoom steps and resizes).
    void rebuildLater();
    void showContextMenu(QPoint pos);
    int stageAt(double layerPosition) const;

    PlanDocument& m_document;
    QCustomPlot* m_plot = nullptr;
    QLabel* m_caption = nullptr;
    std::vector<QVector<double>> m_series; ///< the plotted per-layer series, to rebuild them only when they change
    int m_drag = -1;
    int m_shownLayers = -1; ///< layers of the model the x range was last fitted to
    int m_hover = -1;
    int m_labelsShown = 0;
    bool m_denseHandles = false;
    bool m_rebuildQueued = false;
};

} // namespace pw::ui
