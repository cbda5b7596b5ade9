package timing

import (
	"errors"
	"fmt"
	"math"
)

// Sample is one measurement: X tokens took Y seconds.
type Sample struct{ X, Y float64 }

// ErrDegenerate means the samples cannot determine the curve (all X equal,
// or too few distinct X values).
var ErrDegenerate = errors.New("samples are degenerate")

// FitQuadratic fits y = a·x² + b·x + c by least squares. It needs at least
// three samples with three distinct x values.
func FitQuadratic(s []Sample) (a, b, c float64, err error) {
	if len(s) < 3 {
		return 0, 0, 0, fmt.Errorf("fit quadratic: %d samples: expected at least 3", len(s))
	}
	if err := checkFinite(s); err != nil {
		return 0, 0, 0, fmt.Errorf("fit quadratic: %w", err)
	}
	if distinct(s) < 3 {
		return 0, 0, 0, fmt.Errorf("fit quadratic: %d distinct x values: expected at least 3: %w", distinct(s), ErrDegenerate)
	}
	// Center and scale x for conditioning, fit in u = (x-m)/d, then expand.
	m, d := center(s)
	var n, su, su2, su3, su4, sy, suy, su2y float64
	for _, p := range s {
		u := (p.X - m) / d
		u2 := u * u
		n++
		su += u
		su2 += u2
		su3 += u2 * u
		su4 += u2 * u2
		sy += p.Y
		suy += u * p.Y
		su2y += u2 * p.Y
	}
	mat := [3][4]float64{
		{su4, su3, su2, su2y},
		{su3, su2, su, suy},
		{su2, su, n, sy},
	}
	sol, err := solve3(mat)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("fit quadratic: %w", err)
	}
	qa, qb, qc := sol[0], sol[1], sol[2]
	// y = qa·((x-m)/d)² + qb·(x-m)/d + qc
	a = qa / (d * d)
	b = -2*qa*m/(d*d) + qb/d
	c = qa*m*m/(d*d) - qb*m/d + qc
	return a, b, c, nil
}

// FitLinear fits y = m·x + c by least squares. It needs at least two
// samples with two distinct x values.
func FitLinear(s []Sample) (slope, intercept float64, err error) {
	if len(s) < 2 {
		return 0, 0, fmt.Errorf("fit linear: %d samples: expected at least 2", len(s))
	}
	if err := checkFinite(s); err != nil {
		return 0, 0, fmt.Errorf("fit linear: %w", err)
	}
	if distinct(s) < 2 {
		return 0, 0, fmt.Errorf("fit linear: all x equal: %w", ErrDegenerate)
	}
	mx, _ := center(s)
	var sxx, sxy, my float64
	for _, p := range s {
		my += p.Y
	}
	my /= float64(len(s))
	for _, p := range s {
		dx := p.X - mx
		sxx += dx * dx
		sxy += dx * (p.Y - my)
	}
	slope = sxy / sxx
	return slope, my - slope*mx, nil
}

// FitProfile fits a Profile from prefill samples (prompt tokens, seconds)
// and decode samples (resident context tokens, seconds per iteration).
func FitProfile(prefill, decode []Sample) (Profile, error) {
	a, b, c, err := FitQuadratic(prefill)
	if err != nil {
		return Profile{}, fmt.Errorf("prefill: %w", err)
	}
	m, k, err := FitLinear(decode)
	if err != nil {
		return Profile{}, fmt.Errorf("decode: %w", err)
	}
	return Profile{A: a, B: b, C: c, Slope: m, Intercept: k}, nil
}

func checkFinite(s []Sample) error {
	for i, p := range s {
		if math.IsNaN(p.X) || math.IsInf(p.X, 0) || math.IsNaN(p.Y) || math.IsInf(p.Y, 0) {
			return fmt.Errorf("sample %d: (%v, %v): expected finite numbers", i, p.X, p.Y)
		}
	}
	return nil
}

func distinct(s []Sample) int {
	seen := make(map[float64]struct{}, len(s))
	for _, p := range s {
		seen[p.X] = struct{}{}
	}
	return len(seen)
}

// center returns the mean of x and a positive scale (the largest |x-mean|).
func center(s []Sample) (mean, scale float64) {
	for _, p := range s {
		mean += p.X
	}
	mean /= float64(len(s))
	for _, p := range s {
		scale = math.Max(scale, math.Abs(p.X-mean))
	}
	if scale == 0 {
		scale = 1
	}
	return mean, scale
}

// solve3 solves a 3x3 augmented system by Gaussian elimination with
// partial pivoting.
func solve3(m [3][4]float64) ([3]float64, error) {
	for col := 0; col < 3; col++ {
		piv := col
		for r := col + 1; r < 3; r++ {
			if math.Abs(m[r][col]) > math.Abs(m[piv][col]) {
				piv = r
			}
		}
		if math.Abs(m[piv][col]) < 1e-12 {
			return [3]float64{}, fmt.Errorf("singular normal equations (pivot %g): %w", m[piv][col], ErrDegenerate)
		}
		m[col], m[piv] = m[piv], m[col]
		for r := col + 1; r < 3; r++ {
			f := m[r][col] / m[col][col]
			for k := col; k < 4; k++ {
				m[r][k] -= f * m[col][k]
			}
		}
	}
	var x [3]float64
	for r := 2; r >= 0; r-- {
		v := m[r][3]
		for k := r + 1; k < 3; k++ {
			v -= m[r][k] * x[k]
		}
		x[r] = v / m[r][r]
	}
	return x, nil
}
