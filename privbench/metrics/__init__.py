"""Metrics: pure functions of arrays, no files, no training code.

* `privbench.metrics.image`: MSE, PSNR, SSIM (scikit-image), LPIPS (lpips, only with cached AlexNet
  weights), label accuracy, optimal matching of reconstructions to true images.
* `privbench.metrics.roc`: ROC curves, AUC, TPR at low FPR (scikit-learn).
* `privbench.metrics.binomial`: the exact (Clopper-Pearson) interval of a binomial rate.
* `privbench.metrics.audit`: empirical ε lower bounds (Clopper-Pearson, one-run canary audit).
"""
