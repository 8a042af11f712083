package analyze

import (
	"cmp"
	"slices"
)

// Spend against caps. A run or a tenant is a key of a ledger; each keeps
// one account, its calls, their spend and the largest cap they logged, up
// to Options.MaxKeys keys, and one account more for the calls of every
// key past that, so that a log of a million runs holds MaxKeys accounts.

// ledger is the accounts of one sort of key: runs, or tenants.
type ledger struct {
	accounts map[string]*account
	// other counts the calls of keys past the bound.
	other account
	// defaultCap is the cap of keys that log none: Options.RunCapUSD or
	// TenantCapUSD.
	defaultCap optFloat
}

// account is one key's calls.
type account struct {
	calls, refused, priced int64
	spend                  float64
	// limit is the largest cap logged.
	limit optFloat
}

// capFlag bounds a cap given in Options to [0, MaxCost], NaN to 0.
func capFlag(usd *float64) optFloat {
	if usd == nil {
		return optFloat{}
	}
	if !(*usd > 0) {
		return optFloat{set: true}
	}
	return optFloat{true, min(*usd, MaxCost)}
}

// add counts c, which logged the cap limit, against key, unless key is
// empty. Past maxKeys keys, a new key's calls go to l.other.
func (l *ledger) add(key string, c *call, limit optFloat, maxKeys int) {
	if key == "" {
		return
	}
	ac := l.accounts[key]
	switch {
	case ac != nil:
	case len(l.accounts) >= maxKeys:
		ac = &l.other
	default:
		if l.accounts == nil {
			l.accounts = make(map[string]*account)
		}
		ac = &account{}
		l.accounts[key] = ac
	}
	ac.calls++
	if c.refused {
		ac.refused++
	}
	if c.priced {
		ac.priced++
		ac.spend += c.cost
	}
	if limit.set && (!ac.limit.set || limit.v > ac.limit.v) {
		ac.limit = limit
	}
}

// Spend is one run's or one tenant's calls against its cap.
type Spend struct {
	// Name is the run's or tenant's, as logged, cut to MaxCodeBytes.
	Name    string `json:"name"`
	Calls   int64  `json:"calls"`
	Refused int64  `json:"refused"`
	// PricedCalls are the calls whose cost is known; SpendUSD is theirs,
	// null when there are none.
	PricedCalls int64    `json:"priced_calls"`
	SpendUSD    *float64 `json:"spend_usd"`
	// CapUSD is the largest cap its calls logged, else the one given for
	// all (Options.RunCapUSD, TenantCapUSD); null when there is none.
	CapUSD *float64 `json:"cap_usd"`
	// ShareOfCap is SpendUSD over CapUSD; null when either is unknown or
	// the cap is 0.
	ShareOfCap *float64 `json:"share_of_cap"`
	// PassedCap: SpendUSD is above CapUSD.
	PassedCap bool `json:"passed_cap"`
}

// OtherSpend counts the calls of the runs or tenants past
// Options.MaxKeys, together.
type OtherSpend struct {
	Calls       int64    `json:"calls"`
	Refused     int64    `json:"refused"`
	PricedCalls int64    `json:"priced_calls"`
	SpendUSD    *float64 `json:"spend_usd"`
}

// report returns l's accounts, those that passed or came nearest their
// caps first, and the calls past the bound, nil if none.
func (l *ledger) report() ([]Spend, *OtherSpend) {
	var spends []Spend
	for key, ac := range l.accounts {
		s := Spend{Name: key, Calls: ac.calls, Refused: ac.refused, PricedCalls: ac.priced}
		if ac.priced > 0 {
			s.SpendUSD = usd(ac.spend)
		}
		limit := ac.limit
		if !limit.set {
			limit = l.defaultCap
		}
		if limit.set {
			s.CapUSD = usd(limit.v)
			if s.SpendUSD != nil {
				s.PassedCap = *s.SpendUSD > *s.CapUSD
				if *s.CapUSD > 0 {
					// Finite: spend is below 1e44 (see MaxPrice) and
					// a cap above 0 is at least a millionth.
					share := round(*s.SpendUSD / *s.CapUSD, 1e6)
					s.ShareOfCap = &share
				}
			}
		}
		spends = append(spends, s)
	}
	slices.SortFunc(spends, nearestCapFirst)
	if l.other.calls == 0 {
		return spends, nil
	}
	o := &OtherSpend{Calls: l.other.calls, Refused: l.other.refused, PricedCalls: l.other.priced}
	if o.PricedCalls > 0 {
		o.SpendUSD = usd(l.other.spend)
	}
	return spends, o
}

// nearestCapFirst orders spends: those that passed their caps, then by
// share of their caps, calls refused, spend and calls, most first.
func nearestCapFirst(x, y Spend) int {
	passed := func(s Spend) int {
		if s.PassedCap {
			return 1
		}
		return 0
	}
	shareOf := func(s Spend) float64 {
		if s.ShareOfCap == nil {
			return -1
		}
		return *s.ShareOfCap
	}
	return cmp.Or(
		cmp.Compare(passed(y), passed(x)),
		cmp.Compare(shareOf(y), shareOf(x)),
		cmp.Compare(y.Refused, x.Refused),
		cmp.Compare(deref(y.SpendUSD), deref(x.SpendUSD)),
		cmp.Compare(y.Calls, x.Calls),
		cmp.Compare(x.Name, y.Name))
}
