/*
 * qr.c: the dense numerics of the linregr aggregate (linregr.c), small and self-contained.
 *
 * Least squares from an R factor without forming X'X: rows are folded into an upper-triangular
 * R by Givens rotations (two R factors merge by folding the rows of one into the other); a full
 * rank R is solved and inverted by substitution; singular values come from one-sided Jacobi
 * rotations, which keep them to high relative accuracy whatever the columns' scales.  The tails
 * of Student's t and the chi-squared distributions are the regularized incomplete beta and gamma
 * functions, evaluated by their continued fractions (and the gamma's series).
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "learnedidx.h"

/* Fold row r[start..p-1] (r[j] = 0 for j < start) into the p x p upper-triangular, row-major R:
 * the R factor of [R; r].  r is overwritten. */
void
lx_qr_fold_row(double *R, int p, double *r, int start)
{
	int			j,
				l;

	for (j = start; j < p; j++)
	{
		double	   *row = R + (size_t) j * p;
		double		a = row[j],
					b = r[j],
					h,
					c,
					s;

		if (b == 0.0)
			continue;
		/* hypot, without its cost where the squares can neither overflow nor underflow */
		h = fabs(a) < 1e150 && fabs(b) < 1e150 && (fabs(a) > 1e-150 || fabs(b) > 1e-150) ?
			sqrt(a * a + b * b) : hypot(a, b);
		c = a / h;
		s = b / h;
		row[j] = h;
		r[j] = 0.0;
		for (l = j + 1; l < p; l++)
		{
			double		u = row[l],
						v = r[l];

			row[l] = c * u + s * v;
			r[l] = c * v - s * u;
		}
	}
}

/* Solve R[0:k, 0:k] x = b (R upper triangular, leading dimension ld) by back substitution;
 * false when a diagonal element is zero. */
bool
lx_tri_solve(const double *R, int ld, int k, const double *b, double *x)
{
	int			i,
				j;

	for (i = k - 1; i >= 0; i--)
	{
		double		s = b[i];

		if (R[(size_t) i * ld + i] == 0.0)
			return false;
		for (j = i + 1; j < k; j++)
			s -= R[(size_t) i * ld + j] * x[j];
		x[i] = s / R[(size_t) i * ld + i];
	}
	return true;
}

/* inv = R[0:k, 0:k]^-1 (upper triangular, k x k row-major); false when R is singular.  tick (if
 * given) is called before each column. */
bool
lx_tri_inverse(const double *R, int ld, int k, double *inv, void (*tick) (void))
{
	int			i,
				j,
				l;

	for (j = 0; j < k; j++)
	{
		if (tick)
			tick();
		if (R[(size_t) j * ld + j] == 0.0)
			return false;
		for (i = j + 1; i < k; i++)
			inv[(size_t) i * k + j] = 0.0;
		inv[(size_t) j * k + j] = 1.0 / R[(size_t) j * ld + j];
		for (i = j - 1; i >= 0; i--)
		{
			double		s = 0.0;

			for (l = i + 1; l <= j; l++)
				s += R[(size_t) i * ld + l] * inv[(size_t) l * k + j];
			inv[(size_t) i * k + j] = -s / R[(size_t) i * ld + i];
		}
	}
	return true;
}

/* The singular value decomposition A = U diag(sigma) V^T of the k x k matrix A, stored by columns
 * (A[j * k + i] is A(i, j)), by one-sided Jacobi rotations of its columns: on return column j of
 * A is sigma[j] u_j and V (k x k, by columns) holds the right singular vectors; tick (if given)
 * is called for each column of each sweep.  Returns the sweeps made (at most 64). */
int
lx_jacobi_svd(double *A, double *V, double *sigma, int k, void (*tick) (void))
{
	int			sweep,
				i,
				j,
				r;

	for (i = 0; i < k * k; i++)
		V[i] = 0.0;
	for (i = 0; i < k; i++)
		V[(size_t) i * k + i] = 1.0;
	for (sweep = 1; sweep <= 64; sweep++)
	{
		bool		rotated = false;

		for (i = 0; i < k - 1; i++)
		{
			if (tick)
				tick();
			for (j = i + 1; j < k; j++)
			{
				double	   *ai = A + (size_t) i * k,
						   *aj = A + (size_t) j * k,
						   *vi = V + (size_t) i * k,
						   *vj = V + (size_t) j * k;
				double		alpha = 0.0,
							beta = 0.0,
							gamma = 0.0,
							zeta,
							t,
							c,
							s;

				for (r = 0; r < k; r++)
				{
					alpha += ai[r] * ai[r];
					beta += aj[r] * aj[r];
					gamma += ai[r] * aj[r];
				}
				if (gamma == 0.0 || fabs(gamma) <= DBL_EPSILON * sqrt(alpha) * sqrt(beta))
					continue;
				rotated = true;
				zeta = (beta - alpha) / (2.0 * gamma);
				/* the smaller root of t^2 + 2 zeta t - 1 = 0 (for a huge zeta, 1 / (2 zeta)) */
				t = fabs(zeta) > 1e150 ? 0.5 / zeta : copysign(1.0, zeta) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
				c = 1.0 / sqrt(1.0 + t * t);
				s = c * t;
				for (r = 0; r < k; r++)
				{
					double		x = ai[r],
								y = aj[r];

					ai[r] = c * x - s * y;
					aj[r] = s * x + c * y;
					x = vi[r];
					y = vj[r];
					vi[r] = c * x - s * y;
					vj[r] = s * x + c * y;
				}
			}
		}
		if (!rotated)
			break;
	}
	for (j = 0; j < k; j++)
	{
		double		s = 0.0;

		for (r = 0; r < k; r++)
			s += A[(size_t) j * k + r] * A[(size_t) j * k + r];
		sigma[j] = sqrt(s);
	}
	return sweep;
}

/* lgamma(a) - lgamma(a + b), for b small beside a: Stirling's series for a large a, where the
 * two lgammas would cancel. */
static double
lgamma_diff(double a, double b)
{
	double		c = a + b;

	if (a < 100.0)
		return lgamma(a) - lgamma(c);
	/* (a - 1/2) ln a - a - ((c - 1/2) ln c - c) + the series' terms 1/(12x) - 1/(360x^3) + 1/(1260x^5) */
	return -(a - 0.5) * log1p(b / a) - b * log(c) + b
		+ (1.0 / a - 1.0 / c) / 12.0 - (1.0 / (a * a * a) - 1.0 / (c * c * c)) / 360.0
		+ (1.0 / pow(a, 5) - 1.0 / pow(c, 5)) / 1260.0;
}

static double
lbeta(double a, double b)
{
	return a >= b ? lgamma_diff(a, b) + lgamma(b) : lgamma_diff(b, a) + lgamma(a);
}

#define CF_TINY 1e-300
#define CF_EPS 1e-17
#define CF_MAX 1000000

static long double
lentz_step(long double *c, long double *d, long double coef)
{
	*d = 1.0L + coef * *d;
	if (fabsl(*d) < CF_TINY)
		*d = CF_TINY;
	*d = 1.0L / *d;
	*c = 1.0L + coef / *c;
	if (fabsl(*c) < CF_TINY)
		*c = CF_TINY;
	return *c * *d;
}

/* I_x(a, b), the regularized incomplete beta function, for x < (a + 1) / (a + b + 2), where its
 * continued fraction converges fast; y = 1 - x, given to keep its precision. */
static double
beta_tail(double a, double b, double x, double y)
{
	/* in extended precision: for a large a the fraction's terms nearly cancel */
	long double c = 1.0L,
				d,
				f,
				la = a,
				lb = b,
				lx = x;
	int			m;

	if (x <= 0.0)
		return 0.0;
	d = (1.0L - lb + (la + lb) * (long double) y) / (la + 1.0L);	/* 1 - (a + b) x / (a + 1), uncancelled */
	if (fabsl(d) < CF_TINY)
		d = CF_TINY;
	d = 1.0L / d;
	f = d;
	for (m = 1; m <= CF_MAX; m++)
	{
		long double delta;

		f *= lentz_step(&c, &d, m * (lb - m) * lx / ((la + 2.0L * m - 1.0L) * (la + 2.0L * m)));
		delta = lentz_step(&c, &d, -(la + m) * (la + lb + m) * lx / ((la + 2.0L * m) * (la + 2.0L * m + 1.0L)));
		f *= delta;
		if (fabsl(delta - 1.0L) < CF_EPS)
			break;
	}
	/* x^a y^b / (a B(a, b)), the logarithms taken where they keep their precision */
	return exp(a * (y < 0.5 ? log1p(-y) : log(x)) + b * (x < 0.5 ? log1p(-x) : log(y)) - lbeta(a, b) - log(a)) * (double) f;
}

/* I_x(a, b) by its power series x^a / B(a, b) sum_n (1 - b)_n x^n / (n! (a + n)), for a small x:
 * the terms shrink like (b x)^n / n!, so it suits a large b where the fraction does not. */
static double
beta_series(double a, double b, double x)
{
	long double term = 1.0L,
				sum = 1.0L / a;
	int			n;

	if (x <= 0.0)
		return 0.0;
	for (n = 1; n <= CF_MAX; n++)
	{
		long double add;

		term *= (n - (long double) b) / n * x;
		add = term / (a + n);
		sum += add;
		if (fabsl(add) < fabsl(sum) * CF_EPS)
			break;
	}
	return exp(a * log(x) - lbeta(a, b)) * (double) sum;
}

/* P(|T| > |t|) for Student's t with df degrees of freedom: I_{df/(df + t^2)}(df/2, 1/2). */
double
lx_student_t_sf2(double t, double df)
{
	double		a = df / 2.0,
				b = 0.5,
				t2 = t * t,
				x,
				y;

	if (isnan(t) || isnan(df) || df <= 0.0)
		return NAN;
	if (isinf(t2))
		return 0.0;
	x = df / (df + t2);
	y = t2 / (df + t2);
	/* the fraction where it converges fast, except for many degrees of freedom and a moderate t
	 * (a y = t^2 / 2 below 4), where its terms nearly cancel and the series of the complement
	 * loses nothing */
	if (x < (a + 1.0) / (a + b + 2.0) && !(a > 100.0 && a * y < 4.0))
		return beta_tail(a, b, x, y);
	return 1.0 - beta_series(b, a, y);
}

/* P(X > x) for the chi-squared distribution with df degrees of freedom: Q(df/2, x/2), the
 * regularized upper incomplete gamma function (by its series below s + 1, else its continued
 * fraction). */
double
lx_chi2_sf(double x, double df)
{
	double		s = df / 2.0,
				z = x / 2.0,
				front;
	int			n;

	if (isnan(x) || isnan(df) || df <= 0.0)
		return NAN;
	if (z <= 0.0)
		return 1.0;
	if (isinf(z))
		return 0.0;
	front = exp(s * log(z) - z - lgamma(s));
	if (z < s + 1.0)
	{
		double		term = 1.0 / s,
					sum = term;

		for (n = 1; n <= CF_MAX; n++)
		{
			term *= z / (s + n);
			sum += term;
			if (fabs(term) < fabs(sum) * CF_EPS)
				break;
		}
		return 1.0 - front * sum;
	}
	else
	{
		/* Q = front / (z + 1 - s - 1(1-s)/(z + 3 - s - ...)), by Lentz */
		double		b = z + 1.0 - s,
					c = 1.0 / CF_TINY,
					d = 1.0 / b,
					f = d;

		for (n = 1; n <= CF_MAX; n++)
		{
			double		an = -n * (n - s),
						delta;

			b += 2.0;
			d = an * d + b;
			if (fabs(d) < CF_TINY)
				d = CF_TINY;
			c = b + an / c;
			if (fabs(c) < CF_TINY)
				c = CF_TINY;
			d = 1.0 / d;
			delta = d * c;
			f *= delta;
			if (fabs(delta - 1.0) < CF_EPS)
				break;
		}
		return front * f;
	}
}
