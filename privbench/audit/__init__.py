"""Attacks graded against ground truth: the one attack dispatch, inversion grading, membership
(candidates, reference systems, the canary audit), the mechanism audit and network DP."""
