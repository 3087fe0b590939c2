"""The four built-in algorithms, written in the DSL (compiled like any user algorithm).

The SQL training functions pass MADlib's parameter names;
:data:`learnedidx.indb.dsl.settings.ALIASES` maps them onto the settings below.
"""
from learnedidx.indb.udf.catalog import BUILTINS

# linregr trains through learnedidx.indb.runtime.lstsq (the R factor of the rows, never X'X);
# this source says the same least squares in the DSL and gives its cost model (accel_seconds).
LINREGR = '''
epochs = 1                      # one pass: sum X^T X, X^T y, y and y^2, then solve

def acc_xx(w, x, y):
    return outer(x, x)

def acc_xy(w, x, y):
    return y * x

def acc_y(w, x, y):
    return y

def acc_yy(w, x, y):
    return y * y

def update(w, n, xx, xy, yy):
    c = lstsq(xx, xy)
    # the residual sum of squares at the solution: y'y - c'X'y, as X'X c = X'y
    return c, max(yy - dot(c, xy), 0.0) / n

def loss(w, x, y):
    r = y - dot(w, x)
    return r * r
'''

LOGREGR = '''
epochs = 20                     # Newton (IRLS) iterations
tolerance = 1e-6
labels = "binary"

# y - sigmoid(z) and sigmoid(z) sigmoid(-z), from e = exp(-|z|), which the loss shares:
# neither is 1 - sigmoid(z), which cancels to 0 from z = 37 on (MADlib computes sigmoid(-z) too;
# separable data would stall there)
def acc_grad(w, x, y):
    z = dot(w, x)
    e = exp(-abs(z))
    s = (1.0 if z >= 0.0 else e) / (1.0 + e)     # sigmoid(z)
    t = (e if z >= 0.0 else 1.0) / (1.0 + e)     # sigmoid(-z)
    return (y * t - (1 - y) * s) * x             # y is 0 or 1

def acc_hess(w, x, y):
    z = dot(w, x)
    e = exp(-abs(z))
    return e / ((1.0 + e) * (1.0 + e)) * outer(x, x)

def update(w, grad, hess):
    return w + solve(hess + 1e-10 * eye(len(w)), grad)

def loss(w, x, y):
    z = dot(w, x)
    return log1p(exp(-abs(z))) + max(z, 0.0) - y * z
'''

SVM = '''
epochs = 30                     # Pegasos-style SGD on the hinge loss, model averaging
learning_rate = 0.1
schedule = "inverse"            # lr / (1 + lr * l2 * t)
l2 = 1e-4
labels = "signed"

def gradient(w, x, y):
    return (-y if y * dot(w, x) < 1 else 0.0) * x

def loss(w, x, y):
    return max(0.0, 1 - y * dot(w, x))
'''

LMF = '''
epochs = 50                     # SGD over (row, col, value), factor matrices averaged
learning_rate = 0.01
schedule = "constant"
l2 = 0.01
rank = 10
init_scale = 0.1

def gradient_u(u, v, y):
    return (dot(u, v) - y) * v

def gradient_v(u, v, y):
    return (dot(u, v) - y) * u

def loss(u, v, y):
    e = y - dot(u, v)
    return e * e
'''

#: The built-in algorithms' names (user algorithms may not take them): the one list, which the
#: extension's SQL functions share.
ALGORITHMS = BUILTINS
#: Each one's DSL source (a name of the list without a source fails here, at import).
SOURCES = {name: {"linregr": LINREGR, "logregr": LOGREGR, "svm": SVM, "lmf": LMF}[name] for name in ALGORITHMS}
