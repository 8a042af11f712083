// Package reboundpg is a placeholder.
package reboundpg
