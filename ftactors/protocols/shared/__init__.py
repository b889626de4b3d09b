"""What several protocols use: flush markers (``flush``), the hand-off of parts to the
coordinator (``parts``), groups and clusters (``units``), checkpoint intervals
(``intervals``) and the plan of the intervals of a stack's levels (``multilevel``,
``level_plan``)."""
