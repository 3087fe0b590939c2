"""MADlib's parameter strings (``'name=value, name=value'``) and what ``svm_classification``'s
mean to learnedidx's SVM."""
from __future__ import annotations

from learnedidx import checks
from learnedidx.errors import NotSupportedError, ParameterError
from learnedidx.indb.udf.selectlist import split_top

#: svm_classification's params we take, as the settings they mean.
SVM_PARAMS = {"init_stepsize": "stepsize", "max_iter": "max_iter", "lambda": "lambda", "tolerance": "tolerance"}
#: Those we refuse unless left at MADlib's default (None: refused whatever the value).
SVM_REFUSED = {"decay_factor": None, "n_folds": "0", "validation_result": "", "epsilon": None, "eps_table": "",
               "class_weight": ""}
#: MADlib's defaults of the params svm_classification takes.
SVM_DEFAULTS = {"init_stepsize": 0.01, "max_iter": 100, "lambda": 0.01, "tolerance": 1e-10, "norm": "l2"}
SVM_HINT = ("learnedidx steps with init_stepsize / (1 + init_stepsize * lambda * t) and takes "
            "init_stepsize, max_iter, lambda, tolerance and norm=L2")


def keyvalues(text: str | None, what: str) -> dict[str, str]:
    """MADlib's ``'name=value, name=value'`` parameter string ``what``, as a dict of lower-case
    names to values (quotes around a value taken off)."""
    out = {}
    for item in split_top(text or ""):
        if not item:
            continue
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ParameterError(f"{what} must be name=value pairs, not {item!r}")
        out[name.strip().lower()] = value.strip().strip("'\"")
    return out


def svm_classification(kernel_func: str | None, kernel_params: str | None,
                       params: str | None) -> tuple[dict, dict[str, str]]:
    """The training parameters MADlib's svm_classification arguments mean (its defaults where
    they say nothing), and the summary table's kernel and parameter columns."""
    kernel = (kernel_func or "linear").strip().lower()
    if kernel != "linear":
        raise NotSupportedError(f"kernel_func {kernel!r} is not supported: 'linear' is")
    kp = keyvalues(kernel_params, "kernel_params")
    fit_intercept = kp.pop("fit_intercept", "false").lower()
    if kp or fit_intercept not in ("true", "false"):
        raise ParameterError(f"kernel_params of the linear kernel take fit_intercept=true|false only, "
                             f"not {kernel_params!r}")
    settings: dict = dict(SVM_DEFAULTS)
    for name, value in keyvalues(params, "params").items():
        if name in SVM_REFUSED:
            if SVM_REFUSED[name] is None or value.lower() != SVM_REFUSED[name]:
                err = NotSupportedError(f"svm_classification parameter {name} is not supported")
                err.hint = SVM_HINT
                raise err
        elif name == "norm":
            if value.lower() != "l2":
                raise NotSupportedError(f"norm {value!r} is not supported: L2 is")
        elif name not in SVM_PARAMS:
            raise ParameterError(f"unknown svm_classification parameter {name}")
        elif name == "max_iter":
            settings[name] = checks.integer(f"svm_classification parameter {name}", value, parse=True,
                                            error=ParameterError)
        else:
            settings[name] = checks.number(f"svm_classification parameter {name}", value, parse=True,
                                           error=ParameterError)
    opts = {SVM_PARAMS[k]: v for k, v in settings.items() if k in SVM_PARAMS}
    opts["intercept"] = fit_intercept == "true"
    opts["lambda_per"] = "model"  # MADlib's lambda weighs ||w||^2 against the sum of the losses
    summary = {"kernel_func": kernel, "kernel_params": f"fit_intercept={fit_intercept}",
               "optim_params": "init_stepsize=%r, max_iter=%d, tolerance=%r" % (
                   settings["init_stepsize"], settings["max_iter"], settings["tolerance"]),
               "reg_params": "lambda=%r, norm=L2, n_folds=0" % settings["lambda"]}
    return opts, summary
