"""The built-in registries' entries as `privbench list` prints them: plain data, so that
`list` needs neither torch nor the defenses and attacks. tests/commands/test_listing.py holds
this table to the registries (each entry's name, DP mark and the first sentence of
its docstring); a defense, attack, dataset, model or topology added to privbench is added here."""

from __future__ import annotations

Entry = tuple[str, bool | None, str]
"""(registry key, private (the defenses' DP mark; None in the other registries), description)"""

CATALOG: dict[str, tuple[Entry, ...]] = {
    "defenses": (
        ("adp_vrsgp", True,
         "ADP-VRSGP: adaptive DP via variance-reduced stochastic gradient push."),
        ("const_d2p", True,
         "Const-D2P (Alg. 5, baseline): constant clip bound C_bar and budget mu_bar (eq. 9)."),
        ("d_psgd", False, "D-PSGD: decentralized parallel SGD by gossip (non-private baseline)."),
        ("d_psgd_rr", True,
         "D-PSGD+RR: DeFL-VP's D-PSGD baseline with sign randomized response (no VR, no "
         "compression)."),
        ("defl_vp", True,
         "DeFL-VP: decentralized learning with variance reduction, sign randomized response and "
         "rand-k."),
        ("dfl_compression", False,
         "DFL+Compression: DeFL-VP's D-PSGD baseline with the unbiased rand-k compressor only."),
        ("dfl_vr", False,
         "DFL+VR: DeFL-VP's D-PSGD baseline with exchanged control variates (variance reduction) "
         "only."),
        ("dp_cga", True,
         "DP-CGA: Cross-Gradient Aggregation with batch-level clipping and Gaussian noise "
         "(baseline)."),
        ("dp_dfedsam", True,
         "DP-DFedSAM: DFedSAM's sharpness-aware local step, made sample-level DP, inside "
         "push-sum."),
        ("dp_dpsgd", True,
         "DP-DPSGD: decentralized parallel SGD with per-sample clipping and Gaussian noise "
         "(baseline)."),
        ("dp_sgp", True,
         "DP-SGP: constant-noise DP-SGD inside Stochastic Gradient Push (the DP push-sum "
         "baseline)."),
        ("dpdl", True,
         "DPDL: differentially private decentralized learning with calibrated cross-gradients."),
        ("dpps", True,
         "DPPS, the Differentially Private Perturbed Push-Sum protocol, and its SGP-DP instance."),
        ("dyn_c_d2p", True,
         "Dyn[C]-D2P (Alg. 3): dynamic clip bound C_k, constant budget mu_bar (eq. 9)."),
        ("dyn_d2p", True,
         "Dyn-D2P: dynamic differentially private decentralized learning (push-sum SGD + DP-SGD)."),
        ("dyn_mu_d2p", True,
         "Dyn[mu]-D2P (Alg. 4): constant clip bound C_bar, growing budget mu_k (eqs. 7, 8)."),
        ("muffliato", True,
         "MUFFLIATO: a local DP-SGD step, then accelerated gossip of the noisy models (DPDL's "
         "baseline)."),
        ("partpsp", True,
         "PartPSP: partial communication + DPPS for non-convex optimisation (Algorithm 2)."),
        ("pedfl", True,
         "PEDFL: gossip SGD with Laplace-perturbed models, the fourth row of DPPS's Table 2."),
        ("sgp", False, "Stochastic Gradient Push (non-private baseline)."),
    ),
    "attacks": (
        ("analytic", None,
         "Analytic first-layer inversion: a fully connected first layer's input, read off its "
         "gradient."),
        ("canary", None,
         "White-box gradient-canary audit (one training run): ε lower bound, cap and estimate per "
         "node."),
        ("dlg", None, "Deep Leakage from Gradients (DLG)."),
        ("geiping", None, "Inverting Gradients (Geiping et al.)."),
        ("geiping_multistep", None,
         "Inverting Gradients on updates of several local steps (Geiping et al. 2020, Sec. 5)."),
        ("idlg", None, "Improved Deep Leakage from Gradients (iDLG)."),
        ("lira", None, "LiRA: the likelihood-ratio membership attack with per-example Gaussians."),
        ("mechanism", None,
         "The mechanism audit's configuration: the noise, sampling and sensitivity a run really "
         "drew, measured against its ledger, and the ε they compose to "
         "(`privbench.audit.mechanism`)."),
        ("mia_message", None,
         "Message-level membership inference by a curious neighbour (gradient alignment)."),
        ("mia_threshold", None,
         "Threshold membership inference on a model's loss or confidence (no reference models)."),
        ("rmia", None,
         "RMIA (offline): robust membership inference by pairwise likelihood ratios."),
    ),
    "datasets": (
        ("cifar10", None,
         "CIFAR-10 through torchvision (python batches) from --data-root, then $PRIVBENCH_DATA."),
        ("digits", None,
         "scikit-learn's digits: 1,797 8x8 grey images, a fixed stratified 80/20 train/test "
         "split."),
        ("fashion-mnist", None,
         "fashion-mnist from the first place holding its idx files (see privbench.data.files)."),
        ("mnist", None,
         "mnist from the first place holding its idx files (see privbench.data.files)."),
    ),
    "models": (
        ("cnn", None, "The FedAvg CNN: two 5x5 conv + max-pool blocks, FC(512), FC(classes)."),
        ("lenet", None, "DLG's LeNet (sigmoid): the canonical target of gradient inversion."),
        ("lenet5", None,
         "LeNet-5 (ReLU, max-pool); the second conv is padded for small (< 16 px) images."),
        ("mlp", None, "MLP with hidden widths (128, 64) and ReLU."),
        ("psp_mlp", None,
         "The MLP of the DPPS paper (Zhou, Xue, Chen 2025, Sec. 5.4): D->10, 10->D, D->classes, "
         "tanh after every layer (logits too); DPPS / PartPSP share its first layers."),
        ("resnet", None,
         "A small ResNet (3 stages, one BasicBlock each, widths w, 2w, 4w) with GroupNorm."),
    ),
    "topologies": (
        ("circulant", None,
         "The d-Out graph of the DPPS paper (Zhou, Xue, Chen 2025, Sec. 2.1): node i sends to "
         "i+1..i+k (mod n); d-Out = k + 1."),
        ("complete", None, "Fully connected graph."),
        ("exponential", None,
         "One-peer exponential graph: at round t node i sends to (i + 2^(t mod log2 n)) mod n."),
        ("random_out", None,
         "Random directed graph, out-degree k per node, strongly connected (non-regular "
         "in-degree)."),
        ("ring", None,
         "Ring: each node linked to its two neighbours (symmetric) or its successor (directed)."),
        ("two_hub", None, "Two hubs (nodes 0 and 1) linked to each other and to every other node."),
    ),
}
